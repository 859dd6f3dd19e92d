"""Shared sandbox fixtures: the real bubblewrap backend and a private Docker engine.

Import the fixtures into a test module (``from sandbox_fixtures import ...``) or re-export them
from conftest.py. The Docker engine is started once per test session on a private socket with
a locally built image (no registry pull); where it cannot start, Docker tests skip with the
precise reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from forge_agent.sandbox import Sandbox, make_sandbox

_docker_failure: str | None = None


def _ensure_dockerd() -> None:
    """Install Debian's docker.io when dockerd is missing (root + apt only)."""
    if shutil.which("dockerd") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "docker.io"]
    if subprocess.run(install, capture_output=True, env=env, timeout=300).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=300)
        subprocess.run(install, capture_output=True, env=env, timeout=300)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[str]:
    """The base URL of a private dockerd holding the sandbox image (skips if impossible)."""
    global _docker_failure
    if _docker_failure is not None:
        pytest.skip(_docker_failure)
    from forge_agent.sandbox.docker_local import LocalDockerd, build_python_image

    try:
        _ensure_dockerd()
        engine = LocalDockerd().start()
    except Exception as exc:
        _docker_failure = f"dockerd could not start: {exc} (no Docker engine on this machine)"
        pytest.skip(_docker_failure)
    try:
        import docker

        build_python_image(docker.DockerClient(base_url=engine.base_url))
    except Exception as exc:
        engine.stop()
        _docker_failure = f"could not build the local sandbox image: {exc}"
        pytest.skip(_docker_failure)
    yield engine.base_url
    engine.stop()


@pytest.fixture(scope="session")
def bwrap_sandbox() -> Sandbox:
    """The bubblewrap backend (never skipped: bubblewrap is a hard requirement of the suite)."""
    return make_sandbox("bwrap")


@pytest.fixture(scope="session")
def docker_sandbox(docker_engine: str) -> Sandbox:
    """The Docker backend on the private engine."""
    return make_sandbox("docker", base_url=docker_engine)


@pytest.fixture(scope="session", params=["bwrap", "docker"])
def any_sandbox(request: pytest.FixtureRequest) -> Sandbox:
    """Each backend in turn."""
    return request.getfixturevalue(f"{request.param}_sandbox")


def sandbox_processes(marker: str) -> list[str]:
    """Host processes whose command line contains `marker` (leftovers of a sandboxed run)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and str(os.getpid()) != name:
            found.append(f"{name}: {cmdline[:200]}")
    return found


@pytest.fixture
def unfiltered_prlimit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Both backends' filters without the prlimit64 rule: code then really can starve its
    supervisor (standing for any way code of the supervisor's uid may break it)."""
    from forge_agent.sandbox import seccomp

    monkeypatch.setattr(seccomp, "DENY_PRLIMIT_OF_OTHERS", False)
    seccomp.bwrap_filter.cache_clear()
    seccomp.docker_profile.cache_clear()
    yield
    seccomp.bwrap_filter.cache_clear()
    seccomp.docker_profile.cache_clear()

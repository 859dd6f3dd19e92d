"""Docker backend specifics (skipped with the reason where no engine can start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_agent.sandbox import SandboxError, make_sandbox

try:
    from sandbox_fixtures import docker_engine, docker_sandbox
except ImportError:  # tests/ is a package
    from tests.sandbox_fixtures import docker_engine, docker_sandbox  # noqa: F401


def test_unreachable_engine_raises_sandbox_error(tmp_path) -> None:
    with pytest.raises(SandboxError, match="no Docker engine"):
        make_sandbox("docker", base_url=f"unix://{tmp_path}/missing.sock")


def test_missing_image_raises_sandbox_error(docker_engine) -> None:
    with pytest.raises(SandboxError, match="no-such-image"):
        make_sandbox("docker", base_url=docker_engine, image="no-such-image:1")


def test_container_is_hardened(docker_sandbox) -> None:
    code = (
        "import os\n"
        "print(os.getuid(), os.getgid())\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
        "print(sorted(os.listdir('/sys/class/net')))\n"
    )
    result = docker_sandbox.run(code=code)
    assert result.ok, result
    uid_line, caps, nets = result.stdout.splitlines()
    assert uid_line == "65534 65534"
    assert int(caps, 16) == 0
    assert nets == "['lo']"


def test_session_keeps_files_and_restarts_after_container_death(docker_sandbox) -> None:
    with docker_sandbox.session() as session:
        session.run(code="open('state.txt', 'w').write('step 1')")
        session._container.kill()
        result = session.run(argv=["cat", "state.txt"])
        assert result.stdout == "step 1" and session.restarts == 1
        assert session.read_file("state.txt") == "step 1"


def test_the_image_holds_no_host_library_an_ld_preload_names(monkeypatch) -> None:
    """vLLM's CPU platform sets LD_PRELOAD (libgomp, tcmalloc under site-packages) in the
    process that starts an engine; the image built after it in that process listed them (and
    so `/root/.pyenv` inside every container). Its library scan ignores the environment."""
    import torch

    from forge_agent.sandbox.docker_local import python_rootfs_paths

    preloaded = str(next(Path(torch.__file__).parent.joinpath("lib").glob("libgomp*")))
    monkeypatch.setenv("LD_PRELOAD", preloaded)
    paths = python_rootfs_paths()
    assert not [p for p in paths if p.startswith(str(Path(torch.__file__).parents[2]))]
    assert "/usr/bin/python3" in paths

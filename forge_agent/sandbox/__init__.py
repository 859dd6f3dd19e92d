"""Sandboxes: run model-written code isolated, with bounded time, memory, processes and output.

    from forge_agent.sandbox import Limits, make_sandbox
    sandbox = make_sandbox("bwrap")
    result = sandbox.run(code="print(1 + 1)", limits=Limits(wall_s=5))
    with sandbox.session() as session:          # one per episode: files persist, warm runs
        session.write_file("data.txt", "hello")
        session.run(argv=["cat", "data.txt"])

Backends: ``bwrap`` (bubblewrap; default, no daemon) and ``docker`` (through the docker SDK).
Failures of the code come back in `RunResult`; failures of the sandbox itself raise
`SandboxError` (see `forge_agent.sandbox.base`).
"""

from __future__ import annotations

from typing import Any

from forge_agent.sandbox.base import (
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    SandboxSession,
    normalize_workspace_path,
)
from forge_agent.sandbox.bwrap import BubblewrapSandbox
from forge_agent.sandbox.docker import DockerSandbox

__all__ = [
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxSession",
    "make_sandbox",
    "normalize_workspace_path",
]

BACKENDS = ("bwrap", "docker")


def make_sandbox(backend: str = "bwrap", **backend_kwargs: Any) -> Sandbox:
    """Build a sandbox backend by name: ``"bwrap"`` (default) or ``"docker"``.

    Keyword arguments go to the backend's constructor (`BubblewrapSandbox`, `DockerSandbox`).

    Raises:
        ValueError: for an unknown backend name.
        SandboxError: when the backend cannot work here (no bwrap, no Docker engine, ...).
    """
    if backend == "bwrap":
        return BubblewrapSandbox(**backend_kwargs)
    if backend == "docker":
        return DockerSandbox(**backend_kwargs)
    raise ValueError(f"unknown sandbox backend {backend!r}; expected one of {BACKENDS}")

"""The ``shell`` tool: run a shell command in the episode's sandbox."""

from __future__ import annotations

from forge_agent.sandbox import SandboxSession
from tools.python import format_run_result

__all__ = ["shell"]


def shell(command: str, *, sandbox: SandboxSession) -> str:
    """Run a shell command (/bin/sh) in a sandbox and return its output and exit status.

    The command runs in the episode's workspace directory (files persist between calls, no
    network).

    Args:
        command: The shell command line to run, for example "ls -la && cat notes.txt".
    """
    if not isinstance(command, str) or not command.strip():
        return "Error: command must be a non-empty string"
    return format_run_result(sandbox.run(argv=["/bin/sh", "-c", command]))

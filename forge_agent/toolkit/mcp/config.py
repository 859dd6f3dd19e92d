"""How an env declares an MCP server: a stdio command run in the episode's sandbox, or a URL."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from forge_agent.sandbox import Limits

__all__ = ["MCP_HOME", "SERVER_LIMITS", "MCPServerConfig"]

MCP_HOME = os.environ.get("FORGE_MCP_HOME", "/opt/forge-mcp")
"""Where `scripts/setup.sh` installs the MCP servers the project uses (a venv with the PyPI
servers under ``bin/``, npm servers under ``node/``). It lies outside ``/root`` so a sandbox can
bind it read-only (``BubblewrapSandbox(ro_binds=[MCP_HOME])``)."""

SERVER_LIMITS = Limits(wall_s=3600, cpu_s=120, memory_mb=4096, max_procs=64)
"""Default rlimits of a server process: a long CPU budget (it lives for the whole episode) and
a large address space (Node.js reserves gigabytes of virtual memory it never touches; where
the sandbox has a memory cgroup, that bounds real memory)."""


@dataclass(frozen=True)
class MCPServerConfig:
    """One Model Context Protocol server whose tools an env offers the model.

    Exactly one of `command` and `url`:
    - `command`: a stdio server, started inside the episode's sandbox (network off, files
      confined to the workspace, the sandbox's limits); one process per episode, ended with it.
      The executable must be visible in the sandbox (``/usr``, or a path bound read-only).
    - `url`: a streamable-HTTP server that runs elsewhere (not sandboxed by forge-agent).

    Attributes:
        name: short id of the server, used in errors and metrics (e.g. ``"sqlite"``).
        command: the server's argv (run in the workspace, ``/workspace``).
        url: the server's streamable-HTTP endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        env: extra environment variables of a stdio server.
        tools: offer only these tools (by the server's names); None offers all.
        prefix: prepended to every tool name the model sees (to keep names unique).
        limits: rlimits of the server process (default `SERVER_LIMITS`; the network setting
            always follows the sandbox session).
        start_timeout_s: bound on starting the server and listing its tools.
        max_restarts: a crashed or hung server is restarted on the next call, at most this
            many times per episode; after that its tools answer with an error.
    """

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] | None = None
    prefix: str = ""
    limits: Limits | None = None
    start_timeout_s: float = 30.0
    max_restarts: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"MCPServerConfig.name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "command", tuple(self.command))
        if self.tools is not None:
            object.__setattr__(self, "tools", tuple(self.tools))
        if bool(self.command) == (self.url is not None):
            raise ValueError(
                f"MCP server {self.name!r}: give exactly one of command= (a stdio server) or "
                f"url= (a streamable-HTTP server); got command={self.command!r}, url={self.url!r}"
            )
        if self.command and not all(isinstance(a, str) and a for a in self.command):
            raise ValueError(
                f"MCP server {self.name!r}: command must be non-empty strings, got {self.command!r}"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(
                f"MCP server {self.name!r}: url must start with http:// or https://, "
                f"got {self.url!r}"
            )
        if self.start_timeout_s <= 0:
            raise ValueError(
                f"MCP server {self.name!r}: start_timeout_s must be positive, "
                f"got {self.start_timeout_s!r}"
            )
        if self.max_restarts < 0:
            raise ValueError(
                f"MCP server {self.name!r}: max_restarts must be >= 0, got {self.max_restarts!r}"
            )

    @property
    def stdio(self) -> bool:
        """True for a stdio server (run in the sandbox), False for a URL."""
        return bool(self.command)

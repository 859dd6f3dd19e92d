"""The real MCP servers the tests use (installed by scripts/setup.sh under `MCP_HOME`)."""

from __future__ import annotations

import os

from forge_agent.toolkit.mcp import MCP_HOME, MCPServerConfig

SQLITE = f"{MCP_HOME}/bin/mcp-server-sqlite"
TIME = f"{MCP_HOME}/bin/mcp-server-time"
FILESYSTEM_JS = (
    f"{MCP_HOME}/node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
)

HANG_QUERY = (
    "SELECT (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT count(*) FROM c)"
)
"""A query that never ends (an unbounded recursive CTE): a real server hung in a real call."""


def require_servers() -> None:
    """Fail (not skip) with the fix when setup has not installed the servers."""
    missing = [p for p in (SQLITE, TIME, FILESYSTEM_JS) if not os.path.exists(p)]
    assert not missing, f"MCP servers missing: {missing}; run `bash scripts/setup.sh`"


def sqlite_server(db: str = "/workspace/test.db", **kwargs: object) -> MCPServerConfig:
    return MCPServerConfig("sqlite", command=(SQLITE, "--db-path", db), **kwargs)  # type: ignore[arg-type]


def time_server(**kwargs: object) -> MCPServerConfig:
    return MCPServerConfig("time", command=(TIME, "--local-timezone", "Etc/UTC"), **kwargs)  # type: ignore[arg-type]


def filesystem_server(root: str = "/workspace", **kwargs: object) -> MCPServerConfig:
    return MCPServerConfig("fs", command=("/usr/bin/node", FILESYSTEM_JS, root), **kwargs)  # type: ignore[arg-type]


DOCKER_BINDS = (MCP_HOME, "/usr/lib/x86_64-linux-gnu", "/usr/bin/node")
"""Host paths a Docker sandbox binds read-only for these servers: the servers, the shared
libraries the image lacks (libsqlite3, libgcc_s, Node.js's), and the node binary."""

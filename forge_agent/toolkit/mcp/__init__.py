"""Tools from Model Context Protocol servers: any MCP server's tools as sandboxed `ToolSet` tools.

    from forge_agent.env import MCPToolEnv
    from forge_agent.toolkit.mcp import MCPServerConfig

    class MyEnv(MCPToolEnv):
        mcp_servers = (MCPServerConfig("sqlite", command=(".../mcp-server-sqlite", "--db-path",
                                                          "/workspace/task.db")),)
        def make_sandbox(self):            # stdio servers run in the episode's sandbox
            return make_sandbox("bwrap", ro_binds=[MCP_HOME]).session()

A stdio server is spawned inside the episode's sandbox (`SandboxSession.spawn`: no network,
files confined to the workspace, rlimits and cgroup of the sandbox); a URL server is reached
over streamable HTTP. `list_tools` becomes `ToolSpec`s; each call goes through the `ToolSet`
(the same argument checks, timeout, output cut and ``Error:`` messages as Python tools).
"""

from forge_agent.toolkit.mcp.client import MCPConnection, MCPStartError, tool_spec_of
from forge_agent.toolkit.mcp.config import MCP_HOME, SERVER_LIMITS, MCPServerConfig

__all__ = [
    "MCP_HOME",
    "SERVER_LIMITS",
    "MCPConnection",
    "MCPServerConfig",
    "MCPStartError",
    "tool_spec_of",
]

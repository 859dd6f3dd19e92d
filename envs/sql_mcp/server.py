"""OpenEnv server of the sql_mcp env (SQL questions through a sandboxed MCP server).

Run from the repo root: `python -m envs.sql_mcp.server --port 8000`
(or `uvicorn envs.sql_mcp.server:app`). Play it with OpenEnv's `GenericEnvClient` (WebSocket)
or, as an agent env, with `forge_agent.env.OpenEnvAgentEnv(base_url=...)`.
"""

from __future__ import annotations

from forge_agent.env.adapters.openenv import server_entry_point

ENV_ID = "sql_mcp"
__getattr__, main = server_entry_point(ENV_ID, __doc__.splitlines()[0])

if __name__ == "__main__":
    main()

"""OpenEnv server of the code_exec env (Python tasks, a sandboxed python tool, hidden tests).

Run from the repo root: `python -m envs.code_exec.server --port 8000`
(or `uvicorn envs.code_exec.server:app`). Play it with OpenEnv's `GenericEnvClient` (WebSocket)
or, as an agent env, with `forge_agent.env.OpenEnvAgentEnv(base_url=...)`.
"""

from __future__ import annotations

from forge_agent.env.adapters.openenv import server_entry_point

ENV_ID = "code_exec"
__getattr__, main = server_entry_point(ENV_ID, __doc__.splitlines()[0])

if __name__ == "__main__":
    main()

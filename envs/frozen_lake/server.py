"""OpenEnv server of the frozen_lake env (Gymnasium FrozenLake-v1 played through an act tool).

Run from the repo root: `python -m envs.frozen_lake.server --port 8000`
(or `uvicorn envs.frozen_lake.server:app`). Play it with OpenEnv's `GenericEnvClient` (WebSocket)
or, as an agent env, with `forge_agent.env.OpenEnvAgentEnv(base_url=...)`.
"""

from __future__ import annotations

from forge_agent.env.adapters.openenv import server_entry_point

ENV_ID = "frozen_lake"
__getattr__, main = server_entry_point(ENV_ID, __doc__.splitlines()[0])

if __name__ == "__main__":
    main()

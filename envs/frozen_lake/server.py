"""OpenEnv server of the frozen_lake env (Gymnasium FrozenLake-v1 played through an act tool).

Run from the repo root: `python -m envs.frozen_lake.server --port 8000`
(or `uvicorn envs.frozen_lake.server:app`). Play it with OpenEnv's `GenericEnvClient` (WebSocket)
or, as an agent env, with `forge_agent.env.OpenEnvAgentEnv(base_url=...)`.
"""

from __future__ import annotations

import argparse
from typing import Any

from forge_agent.env.openenv_adapter import openenv_app, serve_openenv

ENV_ID = "frozen_lake"


def __getattr__(name: str) -> Any:
    if name == "app":  # built on first access: importing openenv takes seconds
        return openenv_app(ENV_ID)
    raise AttributeError(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    serve_openenv(ENV_ID, host=args.host, port=args.port)


if __name__ == "__main__":
    main()

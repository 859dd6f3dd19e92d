"""The frozen_lake env: Gymnasium's FrozenLake-v1 played through an `act` tool."""

from envs.frozen_lake.env import (
    DEFAULT_MAP,
    FrozenLakeEnv,
    generate_tasks,
    render_board,
    shortest_path,
)

__all__ = ["DEFAULT_MAP", "FrozenLakeEnv", "generate_tasks", "render_board", "shortest_path"]

"""Random-policy baselines of frozen_lake on the held-out maps the run's evaluator uses.

The env itself plays: each game is a reset of `FrozenLakeEnv` on one of the `eval.num_tasks`
held-out maps of `apps/agent/frozen_lake.yaml` (`forge_agent.env.tasks.eval_tasks`), then
random `act` moves until the game is over (goal, hole or out of moves); success is the env's
own 0/1 reward. Two policies: uniform over the four moves, and uniform over the moves that do
not step into a hole next to the walker (`safe_moves`).

    python -m apps.bench.frozen_lake_random                  # 64 games a map
    python -m apps.bench.frozen_lake_random --games 200
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections.abc import Callable

from envs.frozen_lake.env import ACTIONS, FrozenLakeEnv, safe_moves
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import eval_tasks
from forge_agent.run.config import load_config

CONFIG = "apps/agent/frozen_lake.yaml"


def success_rate(
    env: FrozenLakeEnv, tasks: list[dict], games: int, choose: Callable[[FrozenLakeEnv], str]
) -> float:
    """Share of `games` games a map, over `tasks`, that reach the goal."""
    wins = 0.0
    for task in tasks:
        for _ in range(games):
            asyncio.run(env.reset(task, 0))
            while not (env.terminated or env.truncated):
                env._act(choose(env))
            wins += env.env_return
    return wins / (games * len(tasks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=64, help="games a held-out map")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = load_config(CONFIG)
    tasks = eval_tasks(ResolvedEnv.of(cfg.env), cfg.eval.num_tasks)
    env, rng = FrozenLakeEnv(**cfg.env.kwargs), random.Random(args.seed)
    policies = {
        "uniform random moves": lambda e: rng.choice(ACTIONS),
        "random moves not into a hole": lambda e: rng.choice(
            safe_moves(e._desc, int(e._observation))
        ),
    }
    for name, choose in policies.items():
        rate = success_rate(env, tasks, args.games, choose)
        print(f"{name}: {rate:.3f} of {args.games * len(tasks)} games on {len(tasks)} maps")


if __name__ == "__main__":
    main()

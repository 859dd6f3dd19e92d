"""What a warm start costs on an env, against the calculator's: preparing its demonstrations
(playing and rendering them, before the first step) and a step (tokens a step: how long the
demonstrations are; time a token: how the rows they pack into cost).

Each env's demonstrations (`warm_start.demos`: the env's own `demonstrations()`, or calls
sampled from its tool schemas) are built as a run's warm start builds them
(`demonstration_trajectories`, the tiny model's tokenizer): `--steps x --batch` of them, cut
to the run's episode limits (`--max-turns`, `--max-total-tokens`, `--tool-output-tokens`: a
default run's unless given; `--whole`: none), timed after a warm-up that builds two of each
env's. They are then trained on as the warm start trains: `Trainer.sft_step` on `--batch`
demonstrations, `row_tokens=512`. Envs alternate over `--rounds` so machine noise hits them
alike; the median step counts, the first of each env is warm-up.

    python -m apps.bench.warm_start_cost [--envs calculator 'gymnasium:FrozenLake-v1'] \
        [--batch 32] [--steps 8] [--rounds 4] [--env-kwargs '{"gymnasium:Taxi-v4": {}}']

Prints a table (seconds to prepare, and a demonstration; tokens a step, seconds a step,
microseconds a token; each as a ratio to the calculator's) and writes
bench_results/warm_start_cost.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from apps.bench.util import machine_info, print_table, write_json
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.models.tiny import ensure_tiny_model, load_tokenizer
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.trainer.core import Trainer, TrainerConfig
from forge_agent.warm_start.config import DemoCap, WarmStartConfig
from forge_agent.warm_start.sft import demonstration_trajectories

BASELINE = "calculator"
ENV_KWARGS: dict[str, dict[str, Any]] = {
    "calculator": {"difficulty": 1},
    "gymnasium:FrozenLake-v1": {"make_kwargs": {"is_slippery": False}, "max_moves": 12},
    "gymnasium:Taxi-v4": {"max_moves": 20},
    "frozen_lake": {"size": 4, "max_moves": 12, "board": "first", "demo_noise": "safe"},
}
"""The kwargs an env id is benched with (others: none)."""


def bench(
    env_ids: list[str],
    batch: int,
    rounds: int,
    steps: int = 8,
    cap: DemoCap | None = None,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per env: the seconds its `steps x batch` demonstrations take to prepare, their
    tokens a step and the trainer's time a step."""
    model = ensure_tiny_model()
    renderer = ChatRenderer(load_tokenizer(model))
    trainer = Trainer(TrainerConfig(lr=1e-3, row_tokens=512), str(model), device="cpu", seed=0)
    cfg = WarmStartConfig(steps=steps, batch_size=batch, demo_fraction=0.8)
    kwargs = {**ENV_KWARGS, **(env_kwargs or {})}

    def envs_of(env_id: str) -> list[ResolvedEnv]:
        return [ResolvedEnv.of(env_id, kwargs=kwargs.get(env_id, {}))]

    small = WarmStartConfig(steps=1, batch_size=2, demo_fraction=0.8)
    for env_id in env_ids:  # warm-up: imports, an env's first make
        demonstration_trajectories(renderer, envs_of(env_id), small, cap)
    demos, prepare_s = {}, {}
    for env_id in env_ids:
        started = time.perf_counter()
        demos[env_id] = demonstration_trajectories(renderer, envs_of(env_id), cfg, cap)
        prepare_s[env_id] = time.perf_counter() - started
    rng = random.Random(0)
    times: dict[str, list[float]] = {env_id: [] for env_id in env_ids}
    tokens: dict[str, list[int]] = {env_id: [] for env_id in env_ids}
    for _ in range(rounds + 1):  # the first round is warm-up
        for env_id in env_ids:
            sample = rng.sample(demos[env_id], min(batch, len(demos[env_id])))
            started = time.perf_counter()
            trainer.sft_step(sample)
            times[env_id].append(time.perf_counter() - started)
            tokens[env_id].append(sum(len(d.token_ids) for d in sample))
    rows = []
    for env_id in env_ids:
        step_s = statistics.median(times[env_id][1:])
        step_tokens = statistics.median(tokens[env_id][1:])
        built = demos[env_id]
        rows.append(
            {
                "env": env_id,
                "kwargs": kwargs.get(env_id, {}),
                "demos": len(built),
                "demos_cut": sum(1 for d in built if d.info.get("demo_cut")),
                "demo_tokens_mean": statistics.mean(len(d.token_ids) for d in built),
                "prepare_s": prepare_s[env_id],
                "ms_per_demo": prepare_s[env_id] / len(built) * 1e3,
                "tokens_per_step": step_tokens,
                "s_per_step": step_s,
                "us_per_token": step_s / step_tokens * 1e6,
            }
        )
    base = next(r for r in rows if r["env"] == env_ids[0])
    for row in rows:
        row["prepare_ratio"] = row["prepare_s"] / base["prepare_s"]
        row["step_ratio"] = row["s_per_step"] / base["s_per_step"]
        row["tokens_ratio"] = row["tokens_per_step"] / base["tokens_per_step"]
        row["token_time_ratio"] = row["us_per_token"] / base["us_per_token"]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m apps.bench.warm_start_cost", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--envs", nargs="+", default=[BASELINE, "gymnasium:FrozenLake-v1"])
    parser.add_argument("--batch", type=int, default=32, help="demonstrations a step")
    parser.add_argument(
        "--steps", type=int, default=8, help="warm-start steps: steps x batch demonstrations"
    )
    parser.add_argument("--rounds", type=int, default=4, help="timed steps an env")
    default = RolloutConfig()
    parser.add_argument("--max-turns", type=int, default=default.max_turns)
    parser.add_argument("--max-total-tokens", type=int, default=default.max_total_tokens)
    parser.add_argument("--tool-output-tokens", type=int, default=default.tool_output_tokens)
    parser.add_argument(
        "--whole", action="store_true", help="no episode limits: whole demonstrations"
    )
    parser.add_argument(
        "--env-kwargs", type=json.loads, default={}, help="JSON: env id -> its kwargs"
    )
    parser.add_argument("--out", default="bench_results/warm_start_cost.json")
    args = parser.parse_args(argv)
    envs = [BASELINE, *(e for e in args.envs if e != BASELINE)]  # the baseline first
    cap = None
    if not args.whole:
        cap = DemoCap(args.max_total_tokens, args.max_turns, args.tool_output_tokens)
    rows = bench(envs, args.batch, args.rounds, args.steps, cap, args.env_kwargs)
    columns = [
        ("env", "env", ""),
        ("demos", "demos", "d"),
        ("demos_cut", "cut", "d"),
        ("prepare_s", "prepare s", ".2f"),
        ("ms_per_demo", "ms/demo", ".1f"),
        ("prepare_ratio", "prepare x", ".2f"),
        ("tokens_per_step", "tokens/step", ".0f"),
        ("s_per_step", "s/step", ".2f"),
        ("us_per_token", "us/token", ".0f"),
        ("tokens_ratio", "tokens x", ".1f"),
        ("token_time_ratio", "per-token x", ".2f"),
        ("step_ratio", "step x", ".1f"),
    ]
    print_table(rows, columns)
    limits = "none (whole demonstrations)" if cap is None else cap.describe()
    write_json(
        args.out,
        {
            "machine": machine_info(),
            "batch": args.batch,
            "steps": args.steps,
            "episode_limits": limits,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()

"""Sync vs async training on the default task, side by side in one run.

Two training runs of the same config and seeds, one after the other: `max_policy_lag=0`
(on-policy: rollouts pause while the trainer steps and syncs) and `max_policy_lag=2` (rollouts
run on while the trainer steps; a weight update interrupts running requests and continues them
on the new weights). For each it reports:

- wall-clock to held-out reward `--target` (training-loop seconds, evaluation excluded; the
  evaluation schedule is the same on both sides);
- held-out reward at equal steps;
- generator busy fraction (time with at least one request in the engine / loop time) and
  trainer idle fraction (1 - time in train_step / loop time);

and the ratios async / sync. Prints tables and writes bench_results/async_train.json.

    python -m apps.bench.async_train [--steps 40] [--eval-every 5] [--target 0.6] [key=value ...]
    python -m apps.bench.async_train --config apps/agent/qwen3_1_7b_code_exec.yaml  # on GPUs

On one CPU machine both sides share the same cores: the generator and the trainer compete for
them, so async cannot overlap work the way it does when each has its own GPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from apps.bench.util import machine_info, print_table, write_json
from forge_agent.run.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def time_to_target(evals: list[dict[str, Any]], target: float) -> tuple[float | None, int | None]:
    """(training seconds, step) of the first evaluation at or above `target`, else (None, None)."""
    for e in evals:
        if e.get("eval/reward/mean", 0.0) >= target:
            return float(e["wall_s"]), int(e["step"])
    return None, None


def run_one(config: str | None, overrides: list[str], lag: int, out: Path) -> dict[str, Any]:
    """One training run with `training.max_policy_lag=lag`; its summary plus time to target."""
    from forge_agent.run.controller import train

    cfg = load_config(
        config, [*overrides, f"training.max_policy_lag={lag}", f"output_dir={out / f'lag{lag}'}"]
    )
    summary = asyncio.run(train(cfg))
    return {"lag": lag, **summary}


def summary_row(run: dict[str, Any], target: float) -> dict[str, Any]:
    """One side's table row: loop time, time to `target`, final reward, busy/idle fractions."""
    seconds, step = time_to_target(run["evals"], target)
    timing = run["timing"]
    return {
        "mode": "sync (lag 0)" if run["lag"] == 0 else f"async (lag {run['lag']})",
        "lag": run["lag"],
        "steps": run["steps"],
        "train_loop_s": timing["train_loop_s"],
        "s_per_step": timing["train_loop_s"] / max(run["steps"], 1),
        "time_to_target_s": seconds,
        "step_at_target": step,
        "final_reward": run["evals"][-1].get("eval/reward/mean") if run["evals"] else None,
        "generator_busy_frac": timing["generator_busy_frac"],
        "trainer_idle_frac": timing["trainer_idle_frac"],
        "evicted_groups": run["counts"].get("replay_evicted", 0),
    }


def async_over_sync(sync: dict[str, Any], lagged: dict[str, Any]) -> dict[str, float | None]:
    """Speed-ups of the async side: per step, and to the target (None if a side missed it)."""
    reached = sync["time_to_target_s"] and lagged["time_to_target_s"]
    return {
        "speedup_s_per_step": sync["s_per_step"] / lagged["s_per_step"],
        "speedup_time_to_target": (
            sync["time_to_target_s"] / lagged["time_to_target_s"] if reached else None
        ),
    }


def reward_by_step(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Held-out reward of each side at each evaluated step: `{"step", "lag0", "lag<N>"}` rows."""
    by_step: dict[int, dict[str, Any]] = {}
    for r in runs:
        for e in r["evals"]:
            by_step.setdefault(int(e["step"]), {"step": int(e["step"])})[f"lag{r['lag']}"] = e.get(
                "eval/reward/mean"
            )
    return [by_step[s] for s in sorted(by_step)]


def print_tables(
    rows: list[dict[str, Any]], curve: list[dict[str, Any]], target: float, lag: int
) -> None:
    """The side-by-side table and the reward curve."""
    print_table(
        rows,
        [
            ("mode", "mode", ""),
            ("steps", "steps", "d"),
            ("train_loop_s", "loop s", ".1f"),
            ("s_per_step", "s/step", ".2f"),
            ("time_to_target_s", f"s to {target}", ".1f"),
            ("step_at_target", "step", ""),
            ("final_reward", "final reward", ".3f"),
            ("generator_busy_frac", "gen busy", ".2f"),
            ("trainer_idle_frac", "trainer idle", ".2f"),
        ],
    )
    print_table(
        curve, [("step", "step", "d"), ("lag0", "sync", ".3f"), (f"lag{lag}", "async", ".3f")]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="a run YAML (default: the CPU default)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.6, help="held-out reward to reach")
    parser.add_argument("--lag", type=int, default=2, help="the async side's max_policy_lag")
    parser.add_argument("--out", default=str(ROOT / "bench_results" / "async_train.json"))
    parser.add_argument("overrides", nargs="*", help="config overrides key=value (both sides)")
    args = parser.parse_args(argv)
    overrides = [
        f"training.steps={args.steps}",
        f"eval.every={args.eval_every}",
        "checkpoint.every=0",
        "metrics.console=false",
        *args.overrides,
    ]
    with tempfile.TemporaryDirectory(prefix="async_bench_") as tmp:
        runs = [run_one(args.config, overrides, lag, Path(tmp)) for lag in (0, args.lag)]
    rows = [summary_row(r, args.target) for r in runs]
    ratios = async_over_sync(*rows)
    curve = reward_by_step(runs)
    print_tables(rows, curve, args.target, args.lag)
    print(f"async / sync: {ratios}")
    report = {
        "benchmark": "async_train",
        "machine": machine_info(),
        "config": args.config or "default",
        "overrides": overrides,
        "target": args.target,
        "rows": rows,
        "reward_by_step": curve,
        "ratios": ratios,
    }
    write_json(args.out, report)
    return report


if __name__ == "__main__":
    main()

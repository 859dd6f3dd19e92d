"""Where a training step's time goes, phase by phase, for a config (default: the CPU default).

    python -m apps.bench.step_profile                         # the default run (40 steps)
    python -m apps.bench.step_profile training.steps=10       # any key=value override
    python -m apps.bench.step_profile --from runs/default     # the table of a finished run

Runs `apps.agent.main`'s training (same config, same console) and prints the per-phase table
of `forge_agent.observability.step_profile.PhaseClock`: seconds per step and share of the
wall-clock for train, weight_sync, eval, checkpoint, generate, env, reward and idle (each
instant charged to one phase), and the generator's and trainer's busy fractions. Writes
bench_results/step_profile.json (the summary's profile, timing, evals and config overrides).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from forge_agent.observability.step_profile import format_table


def profile_of(summary: dict[str, Any]) -> dict[str, Any]:
    """The report of one run's `summary.json`."""
    evals = summary.get("evals") or []
    return {
        "benchmark": "step_profile",
        "steps": summary["steps"],
        "profile": summary["profile"],
        "train_loop_s": summary.get("timing", {}).get("train_loop_s"),
        "eval_reward": [(e["step"], e.get("eval/reward/mean")) for e in evals],
        "counts": summary.get("counts", {}),
    }


def run(overrides: list[str], verbose: bool) -> dict[str, Any]:
    """Train with `overrides` on the default config; returns the run's summary."""
    from forge_agent.observability.console import run_console
    from forge_agent.run.config import parse_cli
    from forge_agent.run.controller import train

    cfg = parse_cli(overrides)
    level = os.environ.get("FORGE_AGENT_LOG", "WARNING")
    with run_console(Path(cfg.output_dir) / "run.log", verbose=verbose, level=level):
        return asyncio.run(train(cfg))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="run_dir", help="print the table of a finished run's folder")
    ap.add_argument("--verbose", action="store_true", help="third-party logs on the console")
    ap.add_argument("--out", default="bench_results/step_profile.json")
    args, overrides = ap.parse_known_args(argv)
    if args.run_dir:
        summary = json.loads((Path(args.run_dir) / "summary.json").read_text())
        if "profile" not in summary:
            print(f"{args.run_dir}/summary.json has no profile (an older run)", file=sys.stderr)
            return 2
    else:
        summary = run(overrides, args.verbose)
    report = {**profile_of(summary), "overrides": overrides}
    p = report["profile"]
    print(f"{report['steps']} steps, {p['step_s']:.2f} s per step (evals included)")
    print(format_table(p))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

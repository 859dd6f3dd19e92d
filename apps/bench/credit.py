"""Turn-level credit compared: `none` vs `discounted` vs `gigpo` on multi-step tasks.

For each task config (default: apps/agent/frozen_lake.yaml and apps/agent/multihop.yaml), each
`advantages.turn_credit` mode and each seed, runs `python -m apps.agent.main` as a child
process (the same warm start for every mode: it is cached, so it is built once) and reads the
run's own `summary.json`: held-out success (`eval/reward/mean` of the project's evaluator on
tasks the policy never trained on) at every eval, against step and against training wall time
(`wall_s`, evals excluded). Runs go mode by mode within a seed, so machine noise hits every
mode alike.

Prints a table (per task and mode: the mean over seeds of held-out success at the first and
last eval, the best, and seconds of training), writes bench_results/credit.json and a plot,
bench_results/credit.png (held-out success against step and against wall time, one line per
mode, seeds averaged).

    python -m apps.bench.credit                                   # 2 tasks x 3 modes x 3 seeds
    python -m apps.bench.credit --seeds 0 --configs apps/agent/multihop.yaml -- training.steps=20
    python -m apps.bench.credit --merge runs/credit_*.json --out bench_results/credit.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from apps.bench.util import new_figure, print_table, run_agent, save_figure, write_json

REPO = Path(__file__).resolve().parents[2]
MODES = ("none", "discounted", "gigpo")
CONFIGS = ("apps/agent/frozen_lake.yaml", "apps/agent/multihop.yaml")


def run_one(config: str, mode: str, seed: int, overrides: list[str], out: Path) -> dict[str, Any]:
    """One training run; its evals and timing from summary.json (or the error)."""
    args = ["--config", config, f"advantages.turn_credit={mode}", f"seed={seed}", *overrides]
    return {"config": config, "mode": mode, "seed": seed, **run_agent(args, out, REPO)}


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (config, mode): means over seeds of the first, last and best held-out success."""
    out = []
    keys = sorted({(r["config"], r["mode"]) for r in rows}, key=lambda k: (k[0], MODES.index(k[1])))
    for config, mode in keys:
        runs = [r for r in rows if (r["config"], r["mode"]) == (config, mode) and "evals" in r]
        if not runs:
            out.append({"task": Path(config).stem, "mode": mode, "skipped": "every run failed"})
            continue
        first = [r["evals"][0]["success"] for r in runs]
        last = [r["evals"][-1]["success"] for r in runs]
        best = [max(e["success"] for e in r["evals"]) for r in runs]
        out.append(
            {
                "task": Path(config).stem,
                "mode": mode,
                "seeds": len(runs),
                "start": statistics.fmean(first),
                "final": statistics.fmean(last),
                "final_sd": statistics.stdev(last) if len(last) > 1 else 0.0,
                "best": statistics.fmean(best),
                "steps": runs[0]["evals"][-1]["step"],
                "train_s": statistics.fmean(r["train_loop_s"] or 0.0 for r in runs),
            }
        )
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Held-out success against step and against wall time, per task and mode (seed mean)."""
    configs = sorted({r["config"] for r in rows})
    fig = new_figure(10, 3.6 * len(configs))
    for i, config in enumerate(configs):
        for j, x_key in enumerate(("step", "wall_s")):
            ax = fig.add_subplot(len(configs), 2, 2 * i + j + 1)
            for mode in MODES:
                runs = [r for r in rows if (r["config"], r["mode"]) == (config, mode)]
                runs = [r for r in runs if "evals" in r]
                if not runs:
                    continue
                n = min(len(r["evals"]) for r in runs)
                xs = [statistics.fmean(r["evals"][k][x_key] for r in runs) for k in range(n)]
                ys = [statistics.fmean(r["evals"][k]["success"] for r in runs) for k in range(n)]
                ax.plot(xs, ys, marker="o", label=f"{mode} ({len(runs)} seeds)")
            ax.set_title(f"{Path(config).stem}: held-out success")
            ax.set_xlabel("step" if x_key == "step" else "training seconds (evals excluded)")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", default="bench_results/credit.json")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="run nothing: the table and plot of the runs these earlier outputs hold together "
        "(e.g. one invocation per task and seed)",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (after --)")
    args = parser.parse_args(argv)
    if args.merge:
        rows = [r for f in args.merge for r in json.loads(Path(f).read_text())["rows"]]
        overrides = sorted(
            {o for f in args.merge for o in json.loads(Path(f).read_text())["overrides"]}
        )
        return report(rows, overrides, Path(args.out))
    rows = []
    with tempfile.TemporaryDirectory(prefix="credit-") as tmp:
        for config in args.configs:
            for seed in args.seeds:
                for mode in args.modes:
                    out = Path(tmp) / f"{Path(config).stem}-{mode}-{seed}"
                    print(f"[credit] {Path(config).stem} {mode} seed {seed} ...", flush=True)
                    row = run_one(config, mode, seed, args.overrides, out)
                    final = row["evals"][-1]["success"] if "evals" in row else None
                    print(f"[credit]   held-out {final} in {row['run_s']:.0f} s", flush=True)
                    rows.append(row)
    return report(rows, args.overrides, Path(args.out))


def report(rows: list[dict[str, Any]], overrides: list[str], out: Path) -> int:
    """Print the table; write the rows and table (JSON, .txt) and the plot (.png) at `out`."""
    table_rows = aggregate(rows)
    columns = [
        ("task", "task", "s"), ("mode", "turn_credit", "s"), ("seeds", "seeds", "d"),
        ("start", "start", ".3f"), ("final", "final", ".3f"), ("final_sd", "sd", ".3f"),
        ("best", "best", ".3f"), ("steps", "steps", "d"), ("train_s", "train s", ".0f"),
    ]  # fmt: skip
    table = print_table(table_rows, columns)
    write_json(out, {"overrides": overrides, "rows": rows, "table": table_rows})
    (out.with_suffix(".txt")).write_text(table + "\n")
    plot(rows, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

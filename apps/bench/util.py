"""Small helpers shared by the benchmarks in ``apps/bench``: timing, percentiles, tables, JSON.

Every benchmark prints a table and writes a JSON report; these keep the shapes the same.

    with Timer() as t:
        work()
    rows.append({"name": "work", "seconds": t.seconds})
    print_table(rows, [("name", "name", ""), ("seconds", "s", ".3f")])
    write_json("bench_results/work.json", {"benchmark": "work", "rows": rows})
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "Timer",
    "generation_args",
    "machine_info",
    "measure",
    "new_figure",
    "percentile",
    "print_table",
    "run_agent",
    "save_figure",
    "summary",
    "write_json",
]


class Timer:
    """A ``perf_counter`` stopwatch as a context manager; ``seconds`` holds the elapsed time."""

    def __init__(self) -> None:
        self.start = 0.0
        self.seconds = 0.0

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


def measure(fn: Callable[[], Any], n: int, warmup: int = 2) -> list[float]:
    """Run ``fn`` ``warmup`` times untimed, then ``n`` times; the seconds of each timed run."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        with Timer() as t:
            fn()
        samples.append(t.seconds)
    return samples


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-quantile (``q`` in [0, 1]) of ``samples``, linearly interpolated."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    ordered = sorted(samples)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(samples: Sequence[float], scale: float = 1e3, unit: str = "ms") -> dict[str, float]:
    """n, p50, p95 and mean of ``samples`` (seconds), scaled (default: to milliseconds)."""
    return {
        "n": len(samples),
        f"p50_{unit}": scale * statistics.median(samples),
        f"p95_{unit}": scale * percentile(samples, 0.95),
        f"mean_{unit}": scale * statistics.fmean(samples),
    }


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """Print ``rows`` as an aligned table and return it.

    ``columns`` are ``(key, header, format spec)``, e.g. ``("tok_s", "tokens/s", ".0f")``. A
    missing or None value prints as ``-``; a row with a ``skipped`` key prints its reason.
    """

    def cell(row: dict[str, Any], key: str, spec: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, spec)

    def pad(text: str, width: int, i: int) -> str:  # the first column (a name) reads left
        return text.ljust(width) if i == 0 else text.rjust(width)

    cells = [[cell(r, k, s) for k, _, s in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    headers = [h for _, h, _ in columns]
    lines = ["  ".join(pad(h, w, i) for i, (h, w) in enumerate(zip(headers, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for row, cs in zip(rows, cells, strict=True):
        if "skipped" in row:
            lines.append(f"{pad(cs[0], widths[0], 0)}  skipped: {row['skipped']}")
        else:
            lines.append(
                "  ".join(pad(c, w, i) for i, (c, w) in enumerate(zip(cs, widths, strict=True)))
            )
    text = "\n".join(lines)
    print(text)
    return text


def generation_args(
    doc: str | None,
    name: str,
    max_tokens: int,
    argv: Sequence[str] | None = None,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """The arguments of a benchmark that generates with a model: `--model` (default: the tiny
    model, built if needed), `--max-tokens`, `--repeats` and `--out`
    (bench_results/<name>.json), plus what `extra` adds; the description is `doc`'s first
    line."""
    parser = argparse.ArgumentParser(description=(doc or name).split("\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: the tiny model)")
    parser.add_argument("--max-tokens", type=int, default=max_tokens, help="new tokens/request")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per setting")
    parser.add_argument("--out", default=f"bench_results/{name}.json", help="JSON output path")
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if args.model is None:
        from forge_agent.models.tiny import ensure_tiny_model

        args.model = str(ensure_tiny_model())
    return args


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on: CPU count, platform, Python and torch versions."""
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.device_count() > 0  # NVML: initialises no CUDA
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    return info


def write_json(path: str | Path, report: dict[str, Any]) -> Path:
    """Write ``report`` (plus ``machine``, unless given) as indented JSON; creates folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {**report}
    report.setdefault("machine", machine_info())
    path.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {path}")
    return path


def run_agent(
    args: Sequence[str], out: Path, cwd: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One `python -m apps.agent.main ARGS output_dir=OUT` child process, console off, its
    output in OUT.log; returns {"rc", "run_s", "evals": [{step, wall_s, success}],
    "train_loop_s"} from the run's own summary.json, or {"rc", "run_s", "error": log tail}."""
    argv = [sys.executable, "-m", "apps.agent.main", *args]
    argv += [f"output_dir={out}", "metrics.console=false"]
    started = time.monotonic()
    log = out.with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(cwd), (env or {}).get("PYTHONPATH"), os.environ.get("PYTHONPATH")) if p
    )}  # fmt: skip
    child_env.update({k: v for k, v in (env or {}).items() if k != "PYTHONPATH"})
    with log.open("w") as fh:
        rc = subprocess.run(argv, cwd=cwd, env=child_env, stdout=fh, stderr=subprocess.STDOUT)
    row: dict[str, Any] = {"rc": rc.returncode, "run_s": time.monotonic() - started}
    summary_path = out / "summary.json"
    if rc.returncode != 0 or not summary_path.exists():
        row["error"] = log.read_text()[-1500:]
        return row
    data = json.loads(summary_path.read_text())
    row["evals"] = [
        {"step": e["step"], "wall_s": e.get("wall_s", 0.0), "success": e["eval/reward/mean"]}
        for e in data["evals"]
    ]
    row["train_loop_s"] = data.get("timing", {}).get("train_loop_s")
    return row


def new_figure(width: float, height: float) -> Any:
    """A matplotlib `Figure` on the Agg canvas (no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: Path) -> None:
    """Lay out and write `fig` as a PNG at `path` (folders made), and say where."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")

"""Plot training curves (reward, episode length, tool-call rate, KL, entropy, policy lag).

Usage: python -m apps.plots runs/metrics.jsonl [--out curves.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from forge_agent.observability.plots import plot_curves


def main(argv: list[str] | None = None) -> Path:
    """Parse arguments, write the PNG, print which panels had data and return the PNG path."""
    parser = argparse.ArgumentParser(
        prog="python -m apps.plots", description=__doc__.split("\n")[0]
    )
    parser.add_argument("metrics", type=Path, help="metrics JSONL written by MetricLogger")
    parser.add_argument("--out", type=Path, help="PNG to write (default: <metrics>.png)")
    args = parser.parse_args(argv)

    out = args.out or args.metrics.with_suffix(".png")
    used = plot_curves(args.metrics, out)
    for panel, name in used.items():
        print(f"  {panel:<26} {name or 'not recorded'}")
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()

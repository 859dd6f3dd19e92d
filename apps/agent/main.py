"""Train a tool-using agent with GRPO: `python -m apps.agent.main [--config FILE] [key=value ...]`.

With no arguments this runs the embedded CPU default (apps/agent/default.yaml): the tiny Qwen3
model, a short supervised warm start, then GRPO on the calculator env, evaluating on held-out
tasks as it goes. Outputs land in `output_dir`: metrics.jsonl, curves.png, traces.jsonl,
traces.html, checkpoints/ and summary.json.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    from forge_agent.config import ConfigError, parse_cli

    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_cli(argv)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=os.environ.get("FORGE_AGENT_LOG", "WARNING"))
    from forge_agent.controller import train

    try:
        summary = asyncio.run(train(cfg))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("stopped: actors, env workers and sandboxes were shut down", file=sys.stderr)
        return 130
    evals = summary["evals"]
    if evals:
        first, last = evals[0], evals[-1]
        print(
            f"held-out reward: {first.get('eval/reward/mean', 0):.3f} at step {first['step']}"
            f" -> {last.get('eval/reward/mean', 0):.3f} at step {last['step']}"
        )
    print(
        f"done: {summary['steps']} steps in {summary['wall_s']:.0f}s; outputs in {cfg.output_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Trainer throughput: sequence packing vs padded batches on the same mixed-length trajectories.

Both modes run the same `Trainer.train_step` (same model, loss, token budget per micro-batch);
only `TrainerConfig.packing` differs. Packed: sequences share rows of `--row-tokens` with
block-diagonal attention. Padded: one sequence per row, padded to the longest in its
micro-batch, trajectories in arrival order (no length sorting). Throughput counts real tokens.
The modes alternate step by step so machine noise hits both alike; the median step counts.
Prints a table and writes bench_results/train_step.json.

    python -m apps.bench.train_step [--trajectories 48] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

import torch

from forge_agent.losses import LossConfig
from forge_agent.trainer import Trainer, TrainerConfig
from forge_agent.types import Trajectory


def mixed_trajectories(n: int, vocab: int, seed: int = 0) -> list[Trajectory]:
    """Long-tailed lengths like agent episodes: most short, a few long (32..1024 tokens)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = int(min(1024, max(32, rng.lognormvariate(5.0, 0.8))))
        prompt = min(length // 3, 96)
        ids = [rng.randrange(vocab) for _ in range(length)]
        out.append(
            Trajectory(
                task_id=str(i // 8),
                group_id=str(i),
                token_ids=ids,
                loss_mask=[0] * prompt + [1] * (length - prompt),
                logprobs=[-2.0 if j >= prompt else 0.0 for j in range(length)],
                advantage=rng.choice([-1.0, 1.0]),
            )
        )
    return out


def build_model(vocab: int):
    """The project's default tiny Qwen3 shape (forge_agent.models.tiny), seeded."""
    from forge_agent.models.tiny import TinyModelConfig
    from forge_agent.models.tiny import build_model as build_tiny

    return build_tiny(TinyModelConfig(), vocab)


def main(n: int, steps: int, row_tokens: int, microbatch_tokens: int) -> dict:
    vocab = 512
    trajs = mixed_trajectories(n, vocab)
    trainers = {}
    for mode in ("packed", "padded"):
        cfg = TrainerConfig(
            lr=1e-5,
            loss=LossConfig.preset("dapo"),
            packing=mode == "packed",
            row_tokens=row_tokens,
            microbatch_tokens=microbatch_tokens,
            compute_entropy=False,
        )
        trainers[mode] = Trainer(cfg, model=build_model(vocab))
    runs: dict[str, list[dict]] = {m: [] for m in trainers}
    for _ in range(steps + 1):  # first step of each mode is warm-up
        for mode, trainer in trainers.items():
            runs[mode].append(trainer.train_step(trajs))
    real = sum(len(t.token_ids) for t in trajs)
    rows = {}
    for mode, ms in runs.items():
        step_s = statistics.median(m["train/step_s"] for m in ms[1:])
        pad = ms[-1]["train/padding_frac"]
        rows[mode] = {
            "step_s": step_s,
            "tokens_per_s": real / step_s,
            "padding_frac": pad,
            "padded_tokens": round(real / (1 - pad)) if pad < 1 else None,
            "microbatches": int(ms[-1]["train/microbatches"]),
        }
    ratio = rows["packed"]["tokens_per_s"] / rows["padded"]["tokens_per_s"]
    return {
        "benchmark": "train_step",
        "trajectories": n,
        "real_tokens": real,
        "row_tokens": row_tokens,
        "microbatch_tokens": microbatch_tokens,
        "steps": steps,
        "torch_threads": torch.get_num_threads(),
        "rows": rows,
        "packed_over_padded": ratio,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=48)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--row-tokens", type=int, default=1024)
    ap.add_argument("--microbatch-tokens", type=int, default=4096)
    ap.add_argument("--out", default="bench_results/train_step.json")
    args = ap.parse_args()
    res = main(args.trajectories, args.steps, args.row_tokens, args.microbatch_tokens)
    print(
        f"{res['trajectories']} trajectories, {res['real_tokens']} real tokens, "
        f"budget {res['microbatch_tokens']} tokens/micro-batch, rows of {res['row_tokens']}"
    )
    print(f"{'mode':>7} | {'step s':>7} | {'tokens/s':>9} | {'padding':>7} | {'micro-batches':>13}")
    for mode, r in res["rows"].items():
        print(
            f"{mode:>7} | {r['step_s']:7.2f} | {r['tokens_per_s']:9.0f} | "
            f"{r['padding_frac']:7.1%} | {r['microbatches']:13d}"
        )
    print(f"packed / padded tokens/s: {res['packed_over_padded']:.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")

"""Trainer throughput: the project's `Trainer.train_step` vs a plain transformers step, and
sequence packing vs padded batches, on the same trajectories.

Rows (same model, same loss tokens, one optimizer step each):
- `trainer`: `Trainer.train_step` as the runs use it (packed rows, a group's shared prompt
  computed once, LM head at loss tokens);
- `trainer_unshared`: the same with `TrainerConfig.share_prefix=False` (each episode's prompt
  computed again);
- `trainer_padded`: the same with `TrainerConfig.packing=False` (one sequence per row);
- `plain_hf`: a plain single-process transformers step: the trajectories padded into one
  batch with a 2-D attention mask, `log_softmax` over every position, a policy-gradient loss
  on the loss tokens, backward, clipping, AdamW (what a minimal GRPO loop does).
Shapes: `--shape agent` (default): short episodes like the CPU default's calculator run
(groups of 8 episodes on one ~65-token prompt, 75-160 tokens each, about 15% of them sampled);
`--shape mixed`: long-tailed lengths 32..1024, no shared prompts.
The modes alternate step by step so machine noise hits them alike; the median step counts.
Prints a table and writes bench_results/train_step.json (ratios vs `plain_hf`).

    python -m apps.bench.train_step [--shape agent|mixed] [--trajectories 64] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from forge_agent.algorithms.losses import LossConfig
from forge_agent.trainer import Trainer, TrainerConfig
from forge_agent.types import Trajectory


def _traj(i: int, ids: list[int], prompt: int, rng: random.Random) -> Trajectory:
    n = len(ids)
    return Trajectory(
        task_id=str(i // 8),
        group_id=str(i // 8),
        token_ids=ids,
        loss_mask=[0] * prompt + [1] * (n - prompt),
        logprobs=[-2.0 if j >= prompt else 0.0 for j in range(n)],
        advantage=rng.choice([-1.0, 1.0]),
    )


def mixed_trajectories(n: int, vocab: int, seed: int = 0) -> list[Trajectory]:
    """Long-tailed lengths like agent episodes: most short, a few long (32..1024 tokens)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = int(min(1024, max(32, rng.lognormvariate(5.0, 0.8))))
        prompt = min(length // 3, 96)
        out.append(_traj(i, [rng.randrange(vocab) for _ in range(length)], prompt, rng))
    return out


def agent_trajectories(n: int, vocab: int, seed: int = 0) -> list[Trajectory]:
    """The CPU default's episodes: groups of 8 on one ~65-token prompt (same task, same env
    seed), then 1-3 short turns (10-95 tokens; about 15% of an episode sampled; the tool output
    between turns is not sampled, here simplified to one sampled tail)."""
    rng = random.Random(seed)
    out = []
    prompt: list[int] = []
    for i in range(n):
        if i % 8 == 0:
            prompt = [rng.randrange(vocab) for _ in range(rng.randint(58, 72))]
        rest = rng.randint(10, 95)
        sampled = max(4, int(rest * rng.uniform(0.25, 0.5)))
        ids = prompt + [rng.randrange(vocab) for _ in range(rest)]
        out.append(_traj(i, ids, len(ids) - sampled, rng))
    return out


def build_model(vocab: int):
    """The project's default tiny Qwen3 shape (forge_agent.models.tiny), seeded."""
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import build_model as build_tiny

    return build_tiny(TinyModelConfig(), vocab)


class PlainStep:
    """A plain transformers step on the same trajectories (see the module docstring)."""

    def __init__(self, trajs: list[Trajectory], vocab: int, lr: float = 1e-5) -> None:
        self.model = build_model(vocab).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr)
        T = max(len(t.token_ids) for t in trajs)
        self.ids = torch.zeros(len(trajs), T, dtype=torch.long)  # [B, T]
        self.attn = torch.zeros(len(trajs), T, dtype=torch.long)
        self.mask = torch.zeros(len(trajs), T)
        self.sampler = torch.zeros(len(trajs), T)
        for b, t in enumerate(trajs):
            n = len(t.token_ids)
            self.ids[b, :n] = torch.tensor(t.token_ids)
            self.attn[b, :n] = 1
            self.mask[b, :n] = torch.tensor(t.loss_mask, dtype=torch.float)
            self.sampler[b, :n] = torch.tensor(t.logprobs)
        self.adv = torch.tensor([t.advantage for t in trajs])

    def train_step(self, _: object) -> dict[str, float]:
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(input_ids=self.ids, attention_mask=self.attn, use_cache=False).logits
        logp = torch.log_softmax(logits[:, :-1].float(), -1)
        logp = logp.gather(-1, self.ids[:, 1:, None]).squeeze(-1)  # [B, T-1]
        mask = self.mask[:, 1:]
        ratio = torch.exp(logp - self.sampler[:, 1:])
        loss = -(ratio * self.adv[:, None] * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return {"train/step_s": time.perf_counter() - t0}


def main(shape: str, n: int, steps: int, row_tokens: int, microbatch_tokens: int) -> dict:
    vocab = 512
    make = agent_trajectories if shape == "agent" else mixed_trajectories
    trajs = make(n, vocab)
    steppers: dict[str, object] = {}
    for mode in ("trainer", "trainer_unshared", "trainer_padded"):
        cfg = TrainerConfig(
            lr=1e-5,
            loss=LossConfig.preset("grpo"),
            packing=mode != "trainer_padded",
            share_prefix=mode == "trainer",
            row_tokens=row_tokens,
            microbatch_tokens=microbatch_tokens,
        )
        steppers[mode] = Trainer(cfg, model=build_model(vocab))
    steppers["plain_hf"] = PlainStep(trajs, vocab)
    runs: dict[str, list[float]] = {m: [] for m in steppers}
    for _ in range(steps + 1):  # the first step of each mode is warm-up
        for mode, stepper in steppers.items():
            runs[mode].append(stepper.train_step(trajs)["train/step_s"])
    real = sum(len(t.token_ids) for t in trajs)
    rows = {}
    for mode, times in runs.items():
        step_s = statistics.median(times[1:])
        rows[mode] = {"step_s": step_s, "tokens_per_s": real / step_s}
    plain = rows["plain_hf"]["step_s"]
    for row in rows.values():
        row["vs_plain_hf"] = row["step_s"] / plain
    return {
        "benchmark": "train_step",
        "shape": shape,
        "trajectories": n,
        "real_tokens": real,
        "loss_tokens": sum(t.num_sampled for t in trajs),
        "row_tokens": row_tokens,
        "microbatch_tokens": microbatch_tokens,
        "steps": steps,
        "torch_threads": torch.get_num_threads(),
        "rows": rows,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("agent", "mixed"), default="agent")
    ap.add_argument("--trajectories", type=int, default=64)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--row-tokens", type=int, default=512)
    ap.add_argument("--microbatch-tokens", type=int, default=2048)
    ap.add_argument("--out", default="bench_results/train_step.json")
    args = ap.parse_args()
    res = main(args.shape, args.trajectories, args.steps, args.row_tokens, args.microbatch_tokens)
    print(
        f"{res['trajectories']} {res['shape']} trajectories, {res['real_tokens']} tokens "
        f"({res['loss_tokens']} loss tokens), budget {res['microbatch_tokens']} tokens/micro-batch,"
        f" rows of <= {res['row_tokens']}, {res['torch_threads']} threads"
    )
    print(f"{'mode':>14} | {'step s':>7} | {'tokens/s':>9} | {'vs plain_hf':>11}")
    for mode, r in res["rows"].items():
        print(
            f"{mode:>14} | {r['step_s']:7.3f} | {r['tokens_per_s']:9.0f} | "
            f"{r['vs_plain_hf']:10.2f}x"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")

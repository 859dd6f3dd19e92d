"""The trainer's step on a real pretrained model, by precision and what it trains.

The CPU default's model has 2.9 M parameters; `smollm2-135m` (SmolLM2-135M-Instruct, a GGUF
file shipped on PyPI) has 134.5 M, ~50x the compute a token. This times
`Trainer.train_step` (the GRPO-family loss the runs use) on episodes shaped like
`apps/agent/smollm2_calculator.yaml`'s: groups of 8 on one ~215-token prompt, 45-70 more
tokens each of which ~40 sampled. Modes, each built fresh, alternating over rounds so machine
noise hits them alike (the median step counts; the first step of each build is warm-up):

- `fp32`: full fine-tuning in float32 (the CPU default's settings);
- `bf16_autocast`: the same under `trainer.autocast=bfloat16` (fp32 weights and AdamW);
- `lora16`: `trainer.lora.rank=16` adapters in float32;
- `lora16_bf16`: both;
- `fp32_ckpt`: float32 with activation checkpointing (`trainer.gradient_checkpointing`);
- `fp32_noskip`: `fp32` with `trainer.skip_zero_advantage=false` (every episode forwarded;
  differs from `fp32` only with `--zero-groups`, groups whose episodes all have advantage 0).

Prints a table (seconds a step, ratio to `fp32`, peak RSS growth of the step) and writes
bench_results/real_model_step.json.

    python -m apps.bench.real_model_step [--model smollm2-135m] [--groups 4] [--rounds 2]
    python -m apps.bench.real_model_step --modes fp32_noskip,fp32 --zero-groups 2
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
from pathlib import Path

import torch

from forge_agent.algorithms.losses import LossConfig
from forge_agent.models.hub import resolve_model
from forge_agent.trainer import Trainer, TrainerConfig
from forge_agent.trainer.config import LoraConfig
from forge_agent.types import Trajectory

MODES = {
    "fp32": {},
    "bf16_autocast": {"autocast": "bfloat16"},
    "lora16": {"lora": LoraConfig(rank=16)},
    "lora16_bf16": {"lora": LoraConfig(rank=16), "autocast": "bfloat16"},
    "fp32_ckpt": {"gradient_checkpointing": True},
    # every episode forwarded, advantage 0 or not (`trainer.skip_zero_advantage`'s baseline)
    "fp32_noskip": {"skip_zero_advantage": False},
}


def calculator_episodes(
    groups: int, vocab: int, seed: int = 0, zero_groups: int = 0
) -> list[Trajectory]:
    """Groups of 8 episodes on one ~215-token prompt, then 45-70 tokens, ~40 of them sampled;
    the first `zero_groups` groups at advantage 0 (every episode earned the same reward)."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(205, 225))]
        for _ in range(8):
            rest = rng.randint(45, 70)
            ids = prompt + [rng.randrange(vocab) for _ in range(rest)]
            sampled = rest - 15  # the tool reply between the turns is not sampled
            out.append(
                Trajectory(
                    task_id=str(g),
                    group_id=str(g),
                    token_ids=ids,
                    loss_mask=[0] * (len(ids) - sampled) + [1] * sampled,
                    logprobs=[0.0] * (len(ids) - sampled) + [-1.0] * sampled,
                    advantage=0.0 if g < zero_groups else rng.choice([-1.0, 1.0]),
                )
            )
    return out


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def time_mode(folder: Path, mode: str, trajs: list[Trajectory], steps: int) -> list[float]:
    cfg = TrainerConfig(
        lr=1e-5,
        loss=LossConfig.preset("dapo"),
        row_tokens=512,
        microbatch_tokens=2048,
        **MODES[mode],
    )
    trainer = Trainer(cfg, str(folder), device="cpu", dtype="float32")
    times = [trainer.train_step(trajs)["train/step_s"] for _ in range(steps + 1)]
    del trainer
    gc.collect()
    return times[1:]


def main(
    model: str, groups: int, rounds: int, steps: int, modes: list[str], zero_groups: int = 0
) -> dict:
    folder = resolve_model(model)
    vocab = 49152 if "smollm2" in model else 32000
    trajs = calculator_episodes(groups, vocab, zero_groups=zero_groups)
    runs: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(rounds):
        for mode in modes:
            runs[mode] += time_mode(folder, mode, trajs, steps)
            print(f"  {mode}: {runs[mode][-steps:]}", flush=True)
    base = statistics.median(runs[modes[0]])
    rows = {
        m: {
            "step_s": statistics.median(t),
            "vs_" + modes[0]: statistics.median(t) / base,
            "all_s": t,
        }
        for m, t in runs.items()
    }
    return {
        "benchmark": "real_model_step",
        "model": model,
        "episodes": len(trajs),
        "zero_advantage_groups": zero_groups,
        "tokens": sum(len(t.token_ids) for t in trajs),
        "loss_tokens": sum(t.num_sampled for t in trajs),
        "torch_threads": torch.get_num_threads(),
        "peak_rss_gb": _rss_gb(),
        "rows": rows,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per build")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument(
        "--zero-groups", type=int, default=0, help="groups whose 8 episodes have advantage 0"
    )
    ap.add_argument("--out", default="bench_results/real_model_step.json")
    args = ap.parse_args()
    res = main(
        args.model, args.groups, args.rounds, args.steps, args.modes.split(","), args.zero_groups
    )
    print(
        f"{res['model']}: {res['episodes']} episodes, {res['tokens']} tokens "
        f"({res['loss_tokens']} trained; {args.zero_groups} of {args.groups} groups at "
        f"advantage 0), {res['torch_threads']} threads"
    )
    first = args.modes.split(",")[0]
    print(f"{'mode':>14} | {'step s':>7} | {'vs ' + first:>10}")
    for mode, r in res["rows"].items():
        print(f"{mode:>14} | {r['step_s']:7.2f} | {r['vs_' + first]:9.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")

"""Full fine-tuning vs LoRA on a model 18x the CPU default's: trainer step time, trainer peak
memory, and bytes and seconds per weight sync into a real vLLM engine.

Each mode runs in its own process (so peak memory is its own), on the same model folder and the
same trajectories (the CPU default's episode shape, `apps/bench/train_step.py`):
- `full`: every weight trains (AdamW states for all of them); a sync hands vLLM the whole state
  dict (`VLLMEngine.update_weights`, reloaded in place);
- `lora`: `trainer.lora` adapters (rank `--rank`, all linear layers of the blocks); a sync hands
  vLLM the adapter tensors only (`VLLMEngine.update_adapter`: a new LoRA id, the old removed);
- `lora_merged`: the same adapters, synced as merged full weights (`trainer.lora.sync=merged`,
  for engines that cannot serve adapters).
Step time: median of `--steps` train steps after one warm-up. Peak memory: the process's peak
resident memory after training minus its resident memory once the model was loaded and before
the trainer was built (parameters the trainer adds, gradients, optimizer states, activations).
Sync: the trainer producing what it sends, through the engine's reload, median of `--syncs`.
Prints a table and writes bench_results/lora.json (ratios vs `full`).

`--targets attention` puts the adapters on q/k/v/o only (`trainer.lora`'s default), `all` on
all seven linear layers of each block. `--microbatch-tokens` and `--gradient-checkpointing` set
both modes' trainer alike: they size the activations, which at this model size weigh as much as
the optimizer state LoRA saves.

    python -m apps.bench.lora [--rank 16] [--targets all|attention] [--steps 3] [--syncs 3]
        [--trajectories 32] [--microbatch-tokens 2048] [--gradient-checkpointing]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from apps.bench.util import write_json

MODES = ("full", "lora", "lora_merged")
SHAPE = {  # 51.9 M parameters: 18x the default tiny model's 2.9 M
    "hidden_size": 768,
    "num_layers": 8,
    "num_heads": 12,
    "num_kv_heads": 4,
    "head_dim": 64,
    "intermediate_size": 2048,
}
TARGETS = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def model_folder() -> Path:
    """The bench model (built once, cached like the default tiny model)."""
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import ensure_tiny_model

    return ensure_tiny_model(TinyModelConfig(**SHAPE))


@dataclass
class Settings:
    """One bench run's settings (the command line's options), the same for every mode."""

    rank: int = 16
    steps: int = 3
    syncs: int = 3
    trajectories: int = 32
    targets: str = "all"
    microbatch_tokens: int = 2048
    gradient_checkpointing: bool = False

    def argv(self) -> list[str]:
        """These settings as the options a worker process is started with."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                out += [flag] if value else []
            else:
                out += [flag, str(value)]
        return out


def worker(mode: str, settings: Settings) -> dict[str, Any]:
    """One mode, in this process: train, then sync into a fresh vLLM engine."""
    import torch
    from transformers import AutoModelForCausalLM

    from apps.bench.train_step import agent_trajectories
    from forge_agent.algorithms.losses import LossConfig
    from forge_agent.generator import GeneratorConfig
    from forge_agent.generator.vllm_engine import VLLMEngine
    from forge_agent.trainer import Trainer, TrainerConfig
    from forge_agent.trainer.config import LoraConfig

    rank, steps, syncs, n = settings.rank, settings.steps, settings.syncs, settings.trajectories
    folder = str(model_folder())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    lora = None
    if mode != "full":
        sync = "merged" if mode == "lora_merged" else "adapter"
        targets = TARGETS[settings.targets]
        lora = LoraConfig(rank=rank, alpha=2.0 * rank, target_modules=targets, sync=sync)
    trajs = agent_trajectories(n, model.config.vocab_size)
    base_mb = _rss_mb()
    cfg = TrainerConfig(
        lr=1e-4,
        loss=LossConfig.preset("grpo"),
        row_tokens=512,
        microbatch_tokens=settings.microbatch_tokens,
        gradient_checkpointing=settings.gradient_checkpointing,
        lora=lora,
    )
    trainer = Trainer(cfg, model)
    times = [trainer.train_step(trajs)["train/step_s"] for _ in range(steps + 1)][1:]
    peak_mb = _peak_mb() - base_mb
    trained = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)

    async def sync_times() -> tuple[list[float], int]:
        engine = VLLMEngine(
            GeneratorConfig(max_model_len=512, max_num_seqs=8),
            folder,
            lora=lora if lora is not None and lora.sync == "adapter" else None,
        )
        await engine.start()
        out, nbytes = [], 0
        try:
            for version in range(1, syncs + 1):
                trainer.train_step(trajs)
                started = time.perf_counter()
                state = trainer.sync_state_dict()
                nbytes = sum(v.numel() * v.element_size() for v in state.values())
                if engine.lora is not None:
                    await engine.update_adapter(version, state)
                else:
                    await engine.update_weights(version, state)
                out.append(time.perf_counter() - started)
        finally:
            await engine.shutdown()
        return out, nbytes

    sync_s, sync_bytes = asyncio.run(sync_times())
    return {
        "mode": mode,
        "params": params,
        "trained_params": trained,
        "step_s": statistics.median(times),
        "trainer_peak_mb": peak_mb,
        "sync_bytes": sync_bytes,
        "sync_s": statistics.median(sync_s),
    }


def main(settings: Settings) -> dict[str, Any]:
    model_folder()  # built once, before the workers race for it
    rows = {}
    for mode in MODES:
        cmd = [sys.executable, "-m", "apps.bench.lora", "--worker", mode, *settings.argv()]
        done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
        if done.returncode:
            raise RuntimeError(f"{mode} worker failed:\n{done.stderr[-3000:]}")
        rows[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    full = rows["full"]
    for row in rows.values():
        for key in ("step_s", "trainer_peak_mb", "sync_bytes", "sync_s"):
            row[f"{key}_vs_full"] = row[key] / full[key] if full[key] else 0.0
    return {
        "benchmark": "lora",
        "model": SHAPE,
        **asdict(settings),
        "targets": TARGETS[settings.targets],
        "rows": rows,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--syncs", type=int, default=3)
    ap.add_argument("--trajectories", type=int, default=32)
    ap.add_argument("--targets", choices=sorted(TARGETS), default="all")
    ap.add_argument("--microbatch-tokens", type=int, default=2048)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--worker", choices=MODES, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default="bench_results/lora.json")
    args = ap.parse_args()
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    if args.worker:
        row = worker(args.worker, settings)
        print(json.dumps(row), flush=True)
        sys.exit(0)
    res = main(settings)
    first = res["rows"]["full"]
    print(
        f"model {first['params'] / 1e6:.1f} M parameters, LoRA rank {res['rank']} on "
        f"{res['targets']}, {res['trajectories']} trajectories per step, micro-batches of "
        f"{res['microbatch_tokens']} tokens, gradient checkpointing {res['gradient_checkpointing']}"
    )
    print(
        f"{'mode':>12} | {'trained':>9} | {'step s':>7} | {'peak MB':>8} | {'sync MB':>8} | "
        f"{'sync s':>7} | {'step':>5} | {'peak':>5} | {'bytes':>6} | {'sync':>5}  (vs full)"
    )
    for mode, r in res["rows"].items():
        print(
            f"{mode:>12} | {r['trained_params'] / 1e6:8.2f}M | {r['step_s']:7.3f} | "
            f"{r['trainer_peak_mb']:8.0f} | {r['sync_bytes'] / 2**20:8.2f} | {r['sync_s']:7.3f} | "
            f"{r['step_s_vs_full']:5.2f} | {r['trainer_peak_mb_vs_full']:5.2f} | "
            f"{r['sync_bytes_vs_full']:6.3f} | {r['sync_s_vs_full']:5.2f}"
        )
    write_json(args.out, res)

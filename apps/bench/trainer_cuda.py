"""The trainer on a CUDA device: throughput, memory and MFU of both backends, their logprob
parity, the weight conversion, and the weight path out of GPU memory (shared/GPU.md, checks
1-3). CI has no GPU; this runs where one is lent (on CPU, `--shape tiny` checks the script).

Sections, one process, the GPU's memory freed between them:
- `train`: `Trainer.train_step` (the hf backend) on a Qwen3-0.6B-shaped model (random init
  from its config, no download; `--shape qwen3-0.6b`) in bf16: packed rows, micro-batches of
  `--microbatch-tokens`; then the same with `trainer.lora` (rank 16 on q/k/v/o, the default),
  then `TitanTrainer` (torchtitan's Qwen3, FlexAttention). Tokens/s, peak memory
  (`torch.cuda.max_memory_allocated`) and model FLOPs utilisation against the card's dense
  bf16 peak (989 TFLOP/s for H100/H200 SXM). Model FLOPs per step: 6 N T for the N
  non-embedding weights over T tokens (4 N T with LoRA: frozen weights get no weight
  gradient), 6 d V per loss token for the LM head (computed at loss tokens only), and
  attention's 2 x 2 x heads x head_dim x (causal context) per token and layer, x 3 for
  forward + backward. Pure bf16 (the trainer's `dtype: auto` on cuda: bf16 weights and AdamW
  states, no fp32 master copy).
- `parity`: logprobs of the hf and titan backends on the same weights and tokens, in bf16 and
  in fp32, against the hf backend in fp32 (the bf16 rounding of each backend alone is the
  scale to read the bf16 gap against).
- `convert`: `hf_to_titan` then `titan_to_hf` on the 0.6B state dict on the GPU: exact round
  trip (every tensor `torch.equal`), and the time of each way.
- `pack`: the weight store's write (`weights.layout.pack_into`, tensor by tensor) of the
  trainer's `sync_state_dict()` from GPU memory into a shared-memory file as the store maps it,
  against one device-to-host copy of the same bytes (pageable and pinned), and against packing
  on the GPU first then one copy. GB/s; the first write (page faults) and the median of the
  rest (the store reuses its slots).

    python -m apps.bench.trainer_cuda [--shape qwen3-0.6b|tiny] [--sections train parity ...]

Prints a table per section and writes bench_results/trainer_cuda.json.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from apps.bench.train_step import mixed_trajectories
from apps.bench.util import write_json
from forge_agent.models.config import TinyModelConfig
from forge_agent.models.tiny import build_model
from forge_agent.trainer.compile import compile_decoder_layers

SHAPES = {
    # Qwen3-0.6B's config.json (hub id Qwen/Qwen3-0.6B): 28 layers, d 1024, 16/8 heads of 128
    "qwen3-0.6b": (
        TinyModelConfig(
            hidden_size=1024, num_layers=28, num_heads=16, num_kv_heads=8, head_dim=128,
            intermediate_size=3072, max_position_embeddings=4096, rope_theta=1e6,
            tie_word_embeddings=True,
        ),
        151936,
    ),
    "tiny": (TinyModelConfig(), 1024),  # the CPU default's model: checks the script on CPU
}  # fmt: skip
DENSE_BF16_PEAK = {"H100": 989.4e12, "H200": 989.4e12}  # SXM, dense (no sparsity)
SECTIONS = ("train", "parity", "convert", "pack")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gb() -> float | None:
    return torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else None


def peak_flops() -> float | None:
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in DENSE_BF16_PEAK.items() if k in name), None)


def model_flops(shape: TinyModelConfig, vocab: int, trajs: list, lora: bool) -> float:
    """Model FLOPs of one train step on `trajs` (module docstring)."""
    d, L, hd = shape.hidden_size, shape.num_layers, shape.head_dim
    q, kv = shape.num_heads * hd, shape.num_kv_heads * hd
    per_layer = d * q + 2 * d * kv + q * d + 3 * d * shape.intermediate_size
    tokens = sum(len(t.token_ids) for t in trajs)
    loss_tokens = sum(sum(t.loss_mask) for t in trajs)
    weight_factor = 4 if lora else 6
    dense = weight_factor * L * per_layer * tokens
    head = weight_factor * d * vocab * loss_tokens
    context = sum(n * (n + 1) / 2 for n in (len(t.token_ids) for t in trajs))
    attention = 3 * 2 * 2 * L * q * context
    return dense + head + attention


def save_model(shape: TinyModelConfig, vocab: int, folder: str) -> None:
    build_model(shape, vocab).to(torch.bfloat16).save_pretrained(folder)


def trainer_cfg(args: argparse.Namespace, lora: bool = False):
    from forge_agent.algorithms.losses import LossConfig
    from forge_agent.trainer import TrainerConfig
    from forge_agent.trainer.config import LoraConfig

    return TrainerConfig(
        lr=1e-5,
        loss=LossConfig.preset("grpo"),
        row_tokens=args.row_tokens,
        microbatch_tokens=args.microbatch_tokens,
        logits_chunk_mib=args.logits_chunk_mib,
        lora=LoraConfig() if lora else None,
    )


def time_steps(trainer, trajs: list, steps: int) -> list[float]:
    """Seconds of each of `steps` train steps after one warm-up step."""
    times = []
    for i in range(steps + 1):
        _sync()
        t0 = time.perf_counter()
        trainer.train_step(trajs)
        _sync()
        if i:
            times.append(time.perf_counter() - t0)
    return times


def profile_step(trainer, trajs: list, path: str) -> None:
    """One more train step under `torch.profiler`: the ops by their own device (else CPU) time,
    printed (top 25) and written to `path`."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        trainer.train_step(trajs)
        _sync()
    key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60)
    Path(path).write_text(table)
    print(table, flush=True)


def section_train(args, folder: str, trajs: list) -> list[dict[str, Any]]:
    from forge_agent.trainer import Trainer

    shape, vocab = SHAPES[args.shape]
    tokens = sum(len(t.token_ids) for t in trajs)
    peak = peak_flops()
    rows = []
    for name in args.backends:
        _free()
        try:
            if name == "titan":
                from forge_agent.trainer.titan import TitanTrainer

                trainer = TitanTrainer(trainer_cfg(args), folder)
            else:
                trainer = Trainer(trainer_cfg(args, lora=name == "hf_lora"), folder)
                if args.compile_layers:
                    compile_decoder_layers(trainer.model, args.compile_layers)
            if args.fused_adamw:  # the same AdamW, one fused kernel for every tensor
                group = trainer.optimizer.param_groups[0]
                trainer.optimizer = torch.optim.AdamW(
                    [p for p in trainer.model.parameters() if p.requires_grad],
                    lr=group["lr"], betas=group["betas"], weight_decay=group["weight_decay"],
                    fused=True,
                )  # fmt: skip
            t0 = time.perf_counter()
            times = time_steps(trainer, trajs, args.steps)
            first_s = time.perf_counter() - t0 - sum(times)
            if args.profile and not rows:
                profile_step(trainer, trajs, args.profile)
        except Exception as e:  # a backend that fails is a row with its error, not a crash
            rows.append({"backend": name, "error": f"{type(e).__name__}: {e}"[:400]})
            print(f"[train] {name}: {rows[-1]['error']}", flush=True)
            continue
        step_s = statistics.median(times)
        flops = model_flops(shape, vocab, trajs, lora=name == "hf_lora")
        rows.append(
            {
                "backend": name,
                "dtype": str(trainer.dtype).removeprefix("torch."),
                "step_s": step_s,
                "steps_s": times,
                "first_step_s": first_s,
                "tokens_per_s": tokens / step_s,
                "tflops": flops / step_s / 1e12,
                "mfu": flops / step_s / peak if peak else None,
                "peak_gb": _peak_gb(),
            }
        )
        print(f"[train] {name}: {step_s:.3f} s a step, {tokens / step_s:,.0f} tokens/s", flush=True)
        del trainer
    return rows


def _logprobs(trainer, trajs: list) -> torch.Tensor:
    """The loss tokens' logprobs of `trajs`, concatenated, as float64 on the CPU."""
    out = trainer.compute_logprobs(trajs)
    return torch.cat(
        [
            lp.double().cpu()[torch.tensor(t.loss_mask, dtype=torch.bool)]
            for lp, t in zip(out, trajs, strict=True)
        ]
    )


def section_parity(args, folder: str, trajs: list) -> list[dict[str, Any]]:
    from forge_agent.trainer import Trainer
    from forge_agent.trainer.titan import TitanTrainer

    got: dict[str, torch.Tensor] = {}
    for backend in ("hf", "titan"):
        for dtype in ("float32", "bfloat16"):
            _free()
            cls = TitanTrainer if backend == "titan" else Trainer
            trainer = cls(trainer_cfg(args), folder, dtype=dtype)
            got[f"{backend}/{dtype}"] = _logprobs(trainer, trajs)
            del trainer
    ref = got["hf/float32"]
    rows = []
    for a, b in (
        ("titan/float32", "hf/float32"),
        ("titan/bfloat16", "hf/bfloat16"),
        ("hf/bfloat16", "hf/float32"),
        ("titan/bfloat16", "hf/float32"),
    ):
        diff = (got[a] - got[b]).abs()
        rows.append(
            {
                "pair": f"{a} vs {b}",
                "max_abs": float(diff.max()),
                "mean_abs": float(diff.mean()),
                "tokens": int(diff.numel()),
            }
        )
    rows.append({"pair": "hf/float32: mean logprob", "max_abs": float(ref.mean())})
    return rows


def section_convert(args, folder: str) -> list[dict[str, Any]]:
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from forge_agent.trainer.titan import hf_to_titan, titan_qwen3_config, titan_to_hf

    _free()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    hf = {k: v.to(device) for k, v in load_file(f"{folder}/model.safetensors").items()}
    cfg = titan_qwen3_config(AutoConfig.from_pretrained(folder))
    _sync()
    t0 = time.perf_counter()
    titan = hf_to_titan(hf, cfg)
    _sync()
    t1 = time.perf_counter()
    back = titan_to_hf(titan, cfg)
    _sync()
    t2 = time.perf_counter()
    same = set(back) == set(hf) and all(torch.equal(back[k], hf[k]) for k in hf)
    nbytes = sum(v.numel() * v.element_size() for v in hf.values())
    return [
        {"way": "hf_to_titan", "s": t1 - t0, "tensors": len(titan), "gb": nbytes / 1e9},
        {"way": "titan_to_hf", "s": t2 - t1, "tensors": len(back), "exact_round_trip": same},
    ]


def _shm_buffer(nbytes: int) -> torch.Tensor:
    """A shared-memory file mapped as the weight store maps its slots (`torch.from_file`)."""
    fd, path = tempfile.mkstemp(dir="/dev/shm", prefix="forge-bench-")
    os.close(fd)
    os.truncate(path, nbytes)
    buf = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    os.unlink(path)  # the mapping stays valid
    return buf


def _timed(fn, repeats: int) -> tuple[float, float]:
    """(first, median of the rest) seconds of `fn()`."""
    times = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return times[0], statistics.median(times[1:])


def section_pack(args, folder: str) -> list[dict[str, Any]]:
    from forge_agent.trainer import Trainer
    from forge_agent.weights.layout import layout, pack_into, unpack

    _free()
    state = Trainer(trainer_cfg(args), folder).sync_state_dict()
    metas, nbytes = layout(state)
    device = next(iter(state.values())).device
    shm = _shm_buffer(nbytes)
    flat = torch.empty(nbytes, dtype=torch.uint8, device=device)
    pageable = torch.empty(nbytes, dtype=torch.uint8)
    cases = {
        "pack_into(shm) per tensor, as the store": lambda: pack_into(state, metas, shm),
        "one copy, flat device buffer -> pageable": lambda: pageable.copy_(flat),
        "pack on device, then one copy -> shm": lambda: (
            pack_into(state, metas, flat),
            shm.copy_(flat),
        ),
    }
    if device.type == "cuda":
        pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        cases["one copy, flat device buffer -> pinned"] = lambda: pinned.copy_(flat)
        # the store's slot page-locked in place (cudaHostRegister): D2H copies into it go at
        # pinned speed with no staging copy
        registered = _shm_buffer(nbytes)
        t0 = time.perf_counter()
        torch.cuda.check_error(
            torch.cuda.cudart().cudaHostRegister(registered.data_ptr(), nbytes, 0)
        )
        register_s = time.perf_counter() - t0
        cases["pack_into(shm, cudaHostRegister'd) per tensor"] = lambda: pack_into(
            state, metas, registered
        )
    rows = []
    for name, fn in cases.items():
        first, median = _timed(fn, args.repeats)
        rows.append(
            {
                "case": name,
                "gb": nbytes / 1e9,
                "first_s": first,
                "median_s": median,
                "gb_per_s": nbytes / 1e9 / median,
                "device": device.type,
            }
        )
    if device.type == "cuda":
        rows.append({"case": "cudaHostRegister of the slot (once)", "first_s": register_s})
    views = unpack(metas, shm)
    ok = all(torch.equal(views[k], v.cpu()) for k, v in state.items())
    rows.append({"case": "store layout holds the weights", "ok": ok})
    return rows


def _print(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n== {title}")
    keys = list(dict.fromkeys(k for r in rows for k in r if k != "steps_s"))
    print(" | ".join(keys))
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k, "")
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        print(" | ".join(cells))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    ap.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    ap.add_argument("--backends", nargs="+", default=["hf", "hf_lora", "titan"])
    ap.add_argument("--trajectories", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--row-tokens", type=int, default=4096)
    ap.add_argument("--microbatch-tokens", type=int, default=16384)
    ap.add_argument("--logits-chunk-mib", type=int, default=1024)
    ap.add_argument("--compile-layers", metavar="BACKEND", help="torch.compile decoder layers")
    ap.add_argument("--fused-adamw", action="store_true", help="AdamW(fused=True)")
    ap.add_argument("--profile", help="write a profile of the first backend's step here")
    ap.add_argument("--out", default="bench_results/trainer_cuda.json")
    args = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars: one per trainer
    shape, vocab = SHAPES[args.shape]
    trajs = mixed_trajectories(args.trajectories, vocab)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    res: dict[str, Any] = {
        "benchmark": "trainer_cuda",
        "device": device,
        "torch": torch.__version__,
        "shape": args.shape,
        "parameters": None,
        "trajectories": len(trajs),
        "tokens": sum(len(t.token_ids) for t in trajs),
        "loss_tokens": sum(sum(t.loss_mask) for t in trajs),
        "microbatch_tokens": args.microbatch_tokens,
        "row_tokens": args.row_tokens,
        "logits_chunk_mib": args.logits_chunk_mib,
    }
    print(
        f"{device}, torch {torch.__version__}, {args.shape}: {res['tokens']} tokens "
        f"({res['loss_tokens']} loss tokens) in {len(trajs)} trajectories",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as folder:
        save_model(shape, vocab, folder)
        from forge_agent.models.hub import parameter_count

        res["parameters"] = parameter_count(folder)
        for section in args.sections:
            t0 = time.perf_counter()
            try:
                if section == "train":
                    rows = section_train(args, folder, trajs)
                elif section == "parity":
                    rows = section_parity(args, folder, trajs[:32])
                elif section == "convert":
                    rows = section_convert(args, folder)
                else:
                    rows = section_pack(args, folder)
            except Exception as e:  # report and go on to the next section
                rows = [{"error": f"{type(e).__name__}: {e}"[:600]}]
            res[section] = rows
            _print(f"{section} ({time.perf_counter() - t0:.0f} s)", rows)
            write_json(args.out, res)  # after each section: a later crash keeps the earlier
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

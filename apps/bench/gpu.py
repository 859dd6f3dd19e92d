"""The whole loop on one GPU (issue 40): generation, weight sync, a colocated RL step, the
sampler/trainer gap, and TRL's colocated `GRPOTrainer` on the same work. Prepared on CPU
(`--shape tiny` checks the script; tests/test_bench_gpu.py); the numbers are a GPU's.

Sections, each in a fresh process (the GPU's memory freed between them; vLLM forks its
engine core before anything touches CUDA):
- `engine`: `VLLMEngine.generate` on `--prompts` prompts of `--prompt-len` random tokens,
  `--max-tokens` each (ignore_eos), all in flight: generated tokens/s.
- `llm`: vLLM's `LLM.generate` on the same prompts with the same engine arguments.
- `sync`: the trainer's `sync_state_dict()` (a tied LM head once) into the running engine
  as a run moves it (`update_weights_shared`: the weight store's layout, packed into a slot,
  read in place by vLLM's worker), seconds and GB/s, median of `--repeats`, two ways: the
  store's shared memory (trainer and generator in two processes or on two GPUs: device to
  host into the page-locked slot, host to device) and its device transport (colocated on one
  GPU: a slot of the trainer's GPU memory opened by CUDA IPC, device to device; on CPU its host
  stand-in); then
  LoRA (rank 16, q/k/v/o): the adapter's tensors (`update_adapter`). The slots are packed
  as the store packs them, without its Monarch actor (which may not run on the GPU machine).
- `step`: `--steps` colocated RL steps (`services.colocate`: vLLM's sleep mode on CUDA,
  `SleepStandin` on CPU): generate, sleep(1), train, wake_up(weights), sync (the device
  transport, as `sync`), wake_up(kv_cache),
  each phase timed; per step the sampler's logprobs against the trainer's on the sampled
  tokens (before the step): mean |difference| and k3 = E[r - 1 - log r], r = p_trainer /
  p_sampler (Schulman 2020, "Approximating KL divergence").
- `trl`: TRL's `GRPOTrainer` (`use_vllm=True, vllm_mode="colocate"`) on the same model,
  prompts and lengths: seconds per step, or the error verbatim.

    python -m apps.bench.gpu [--shape qwen3-0.6b|tiny] [--sections engine llm sync step trl]

Prints a table and writes bench_results/gpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from apps.bench.util import machine_info, print_table, write_json

SECTIONS = ("engine", "llm", "sync", "step", "trl")
SIZES = {  # (prompts, prompt tokens, tokens out, steps): issue 40's work, and a CPU check
    "qwen3-0.6b": (256, 256, 256, 3),
    "tiny": (8, 16, 16, 2),
}


def model_folder(shape: str, root: Path) -> Path:
    """A tied model of `shape` (random init, no download) with the tiny model's tokenizer."""
    from forge_agent.models.config import TinyModelConfig
    from forge_agent.models.tiny import build_model, ensure_tiny_model

    tiny = ensure_tiny_model(TinyModelConfig(tie_word_embeddings=True))
    if shape == "tiny":
        return tiny
    import torch
    from transformers import AutoTokenizer

    from apps.bench.trainer_cuda import SHAPES

    folder = root / shape
    if not (folder / "config.json").exists():
        cfg, vocab = SHAPES[shape]
        build_model(cfg, vocab).to(torch.bfloat16).save_pretrained(folder)
        AutoTokenizer.from_pretrained(tiny).save_pretrained(folder)
    return folder


def prompts(args: argparse.Namespace) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(20, 1000) for _ in range(args.prompt_len)] for _ in range(args.prompts)]


def generator_config(args: argparse.Namespace, **kw: Any):
    from forge_agent.generator import GeneratorConfig

    return GeneratorConfig(
        max_model_len=args.prompt_len + args.max_tokens + 64,
        gpu_memory_utilization=args.gpu_memory_utilization,
        **kw,
    )


def _sampling(args: argparse.Namespace, seed: int | None = None):
    from forge_agent.generator import SamplingConfig

    return SamplingConfig(max_tokens=args.max_tokens, ignore_eos=True, seed=seed)


async def section_engine(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from forge_agent.generator.vllm_engine import VLLMEngine

    engine = VLLMEngine(generator_config(args), str(folder))
    await engine.start()
    try:
        await asyncio.gather(*(engine.generate(p, _sampling(args)) for p in prompts(args)[:4]))
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(engine.generate(p, _sampling(args)) for p in prompts(args)))
        seconds = time.perf_counter() - t0
    finally:
        await engine.shutdown()
    tokens = sum(len(c.token_ids) for c in outs)
    return {"case": "VLLMEngine.generate", "seconds": seconds, "tokens_per_s": tokens / seconds}


def section_llm(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """vLLM's own `LLM.generate` on the same engine arguments and environment as the engine
    section (on CPU, V1 multiprocessing off: the engine core in this process, as the
    project's engine runs it), so the ratio compares the two front ends, not two setups."""
    from forge_agent.generator.engine_args import engine_args, engine_environ

    config = generator_config(args)
    for key, value in engine_environ(config).items():
        os.environ.setdefault(key, value)
    from vllm import LLM, SamplingParams

    kwargs = engine_args(config, str(folder), "auto", 0)
    for key in ("worker_extension_cls", "distributed_executor_backend"):
        kwargs.pop(key)
    llm = LLM(**kwargs)
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, detokenize=False)
    batch = [{"prompt_token_ids": p} for p in prompts(args)]
    llm.generate(batch[:4], params, use_tqdm=False)
    t0 = time.perf_counter()
    outs = llm.generate(batch, params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"case": "LLM.generate", "seconds": seconds, "tokens_per_s": tokens / seconds}


async def section_sync(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    from forge_agent.generator.vllm_engine import VLLMEngine
    from forge_agent.trainer import Trainer, TrainerConfig
    from forge_agent.trainer.config import LoraConfig
    from forge_agent.weights.device_slots import DeviceSlots, HostLocks, device_of

    rows = []
    cases = {"full, store shared memory (2 processes)": "cpu", "full, GPU slot (colocated)": None}
    for lora in (None, LoraConfig(rank=16)):
        engine = VLLMEngine(generator_config(args), str(folder), lora=lora)
        await engine.start()  # before the trainer touches CUDA in this process
        try:
            trainer = Trainer(TrainerConfig(lora=lora), str(folder))
            state = trainer.sync_state_dict()
            nbytes = sum(v.numel() * v.element_size() for v in state.values())
            for case, where in ({"LoRA adapter (rank 16)": None} if lora else cases).items():
                slots, locks, times = DeviceSlots(1), HostLocks(), []
                device = device_of(state) if where is None else where
                for version in range(len(rows) * 100 + 1, len(rows) * 100 + args.repeats + 2):
                    t0 = time.perf_counter()
                    if lora:
                        await engine.update_adapter(version, state)
                    else:
                        view = slot_view(state, version, slots, device, locks)
                        await engine.update_weights_shared(view)
                    times.append(time.perf_counter() - t0)
                locks.release_all()
                slots.close()
                median = statistics.median(times[1:])
                reload = engine.last_reload[0] if engine.last_reload else {}
                rows.append({
                    "case": case, "tensors": len(state), "GB": nbytes / 1e9, "first_s": times[0],
                    "median_s": median, "GB_per_s": nbytes / 1e9 / median,
                    "reload_s": reload.get("reload_s"),
                })  # fmt: skip
        finally:
            await engine.shutdown()
    return rows


def slot_view(state: dict, version: int, slots: Any, device: Any, locks: Any = None) -> Any:
    """`state` packed into a slot on `device` as the weight store packs a version
    (`DeviceSlots.pack`; the GPU's memory: the device transport; "cpu": host shared memory, as
    the store's own, page-locked by `locks` as the store does, from the second pack on), and
    the view vLLM's worker reads it by (`VLLMEngine.update_weights_shared`)."""
    import torch

    from forge_agent.weights.device_slots import DeviceView
    from forge_agent.weights.layout import layout, meta_table

    metas, nbytes = layout(state)
    buf, handle = slots.pack(state, metas, nbytes, version, set(), torch.device(device))
    if locks is not None and buf.device.type == "cpu":
        locks.lock(str(buf.data_ptr()), buf, state)
    return DeviceView(version, handle, nbytes, meta_table(metas))


def _trajectory(prompt: list[int], completion: Any, advantage: float):
    from forge_agent.types import Trajectory

    ids = prompt + completion.token_ids
    n = len(prompt)
    return Trajectory(
        task_id="bench", group_id="bench", token_ids=ids,
        loss_mask=[0] * n + [1] * len(completion.token_ids),
        logprobs=[0.0] * n + list(completion.logprobs), advantage=advantage,
        versions=[-1] * n + list(completion.versions),
    )  # fmt: skip


def logprob_gap(trajs: list, trainer_lps: list) -> dict[str, float]:
    """Mean |sampler - trainer| logprob and k3 = E[r - 1 - log r], r = p_trainer / p_sampler,
    over the sampled tokens."""
    import torch

    diffs = []
    for traj, lp in zip(trajs, trainer_lps, strict=True):
        mask = torch.tensor(traj.loss_mask, dtype=torch.bool)
        diffs.append(lp.float().cpu()[mask] - torch.tensor(traj.logprobs)[mask])
    log_r = torch.cat(diffs)  # log p_trainer - log p_sampler
    k3 = (log_r.exp() - 1 - log_r).mean()
    return {"mean_abs_diff": float(log_r.abs().mean()), "k3": float(k3)}


async def section_step(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    from forge_agent.generator.config import on_cpu
    from forge_agent.generator.vllm_engine import VLLMEngine
    from forge_agent.trainer import Trainer, TrainerConfig
    from forge_agent.weights.device_slots import DeviceSlots, device_of

    mode = "standin" if on_cpu() else "sleep"
    engine = VLLMEngine(generator_config(args), str(folder), colocate=mode)
    await engine.start()  # before the trainer touches CUDA in this process
    trainer = Trainer(TrainerConfig(lr=1e-5), str(folder))
    rows, slots = [], DeviceSlots(1)
    try:
        for step in range(1, args.steps + 1):
            phases = Phases()
            batch = prompts(args)
            outs = await asyncio.gather(
                *(engine.generate(p, _sampling(args, seed=i)) for i, p in enumerate(batch))
            )
            phases.done("generate")
            trajs = [_trajectory(p, c, 1.0 if i % 2 else -1.0) for i, (p, c) in
                     enumerate(zip(batch, outs, strict=True))]  # fmt: skip
            gap = logprob_gap(trajs, trainer.compute_logprobs(trajs))
            phases.done("trainer_logprobs")
            await engine.sleep(1)
            phases.done("sleep")
            trainer.train_step(trajs)
            _free_cuda_cache()
            phases.done("train")
            await engine.wake_up(["weights"])
            phases.done("wake_weights")
            state = trainer.sync_state_dict()
            await engine.update_weights_shared(slot_view(state, step, slots, device_of(state)))
            phases.done("sync")
            await engine.wake_up(["kv_cache"])
            phases.done("wake_kv_cache")
            took = phases.seconds
            step_s = sum(v for k, v in took.items() if k != "trainer_logprobs")
            rows.append({"step": step, "colocate": mode, "step_s": step_s, **gap, **took})
    finally:
        slots.close()
        await engine.shutdown()
    return rows


class Phases:
    """Seconds of each phase, each ending at `done(name)` where the previous one ended."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._since = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name], self._since = now - self._since, now


def _free_cuda_cache() -> None:
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def section_trl(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """TRL's colocated GRPOTrainer on the same prompts and lengths; the error verbatim if it
    cannot run here."""
    try:
        from datasets import Dataset
        from transformers import AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        texts = [tokenizer.decode(p) for p in prompts(args)]
        config = GRPOConfig(
            output_dir=tempfile.mkdtemp(), use_vllm=True, vllm_mode="colocate",
            per_device_train_batch_size=min(args.prompts, 8), num_generations=min(args.prompts, 8),
            max_completion_length=args.max_tokens, max_steps=args.steps, report_to=[],
            logging_steps=1, bf16=not _cpu(), vllm_gpu_memory_utilization=0.3,
        )  # fmt: skip
        trainer = GRPOTrainer(
            model=str(folder),
            reward_funcs=lambda completions, **_: [float(len(c)) for c in completions],
            args=config,
            train_dataset=Dataset.from_dict({"prompt": texts}),
            processing_class=tokenizer,
        )
        t0 = time.perf_counter()
        trainer.train()
        return {
            "case": "TRL GRPOTrainer colocate",
            "step_s": (time.perf_counter() - t0) / args.steps,
        }
    except Exception as exc:  # the error is the result
        return {"case": "TRL GRPOTrainer colocate", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-2000:]}  # fmt: skip


def _cpu() -> bool:
    from forge_agent.generator.config import on_cpu

    return on_cpu()


def run_section(args: argparse.Namespace, name: str, folder: Path) -> Any:
    if name == "llm":
        return section_llm(args, folder)
    if name == "trl":
        return section_trl(args, folder)
    return asyncio.run(globals()[f"section_{name}"](args, folder))


def in_child(args: argparse.Namespace, name: str) -> Any:
    """Section `name` in a fresh process; its JSON result, or the error verbatim."""
    argv = [sys.executable, "-m", "apps.bench.gpu", "--child", name, *args.passthrough]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=args.section_timeout)
    except subprocess.TimeoutExpired as exc:  # the next sections still run
        tail = (exc.stderr or b"")[-3000:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {"case": name, "error": f"timed out after {args.section_timeout} s\n{tail}"}
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not lines:
        return {"case": name, "error": done.stderr[-3000:] or f"exit {done.returncode}"}
    return json.loads(lines[-1].removeprefix("RESULT "))


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SIZES))
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    p.add_argument("--section-timeout", type=int, default=540)
    p.add_argument("--root", default=str(Path(tempfile.gettempdir()) / "forge-bench-gpu"))
    p.add_argument("--out", default="bench_results/gpu.json")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.prompts, args.prompt_len, args.max_tokens, args.steps = SIZES[args.shape]
    args.passthrough = [a for a in argv if a != "--child"]
    if args.child:  # drop "--child NAME" from what children pass on
        i = argv.index("--child")
        args.passthrough = argv[:i] + argv[i + 2 :]
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(sys.argv[1:] if argv is None else argv)
    folder = model_folder(args.shape, Path(args.root))
    if args.child:
        print("RESULT " + json.dumps(run_section(args, args.child, folder), default=str))
        return {}
    report: dict[str, Any] = {"machine": machine_info(), "shape": args.shape,
                              "work": SIZES[args.shape], "sections": {}}  # fmt: skip
    for name in args.sections:
        t0 = time.perf_counter()
        report["sections"][name] = in_child(args, name)
        print(f"[{name}] {time.perf_counter() - t0:.0f} s", flush=True)
        write_json(args.out, report)  # a run cut short keeps the sections that finished
    print_report(report["sections"])
    write_json(args.out, report)
    return report


def print_report(sections: dict[str, Any]) -> None:
    gen = [sections[k] for k in ("engine", "llm") if k in sections]
    if len(gen) == 2 and "tokens_per_s" in gen[0] and "tokens_per_s" in gen[1]:
        gen[0]["vs_llm_generate"] = gen[0]["tokens_per_s"] / gen[1]["tokens_per_s"]
    print_table(gen, [("case", "case", "s"), ("tokens_per_s", "tokens/s", ",.0f"),
                      ("vs_llm_generate", "x LLM.generate", ".2f")])  # fmt: skip
    if isinstance(sections.get("sync"), list):
        print_table(sections["sync"], [
            ("case", "sync", "s"), ("GB", "GB", ".3f"), ("median_s", "s", ".3f"),
            ("GB_per_s", "GB/s", ".2f"), ("reload_s", "reload s", ".3f")])  # fmt: skip
    if isinstance(sections.get("step"), list):
        cols = ["generate", "sleep", "train", "wake_weights", "sync", "wake_kv_cache"]
        print_table(sections["step"], [
            ("step", "step", "d"), ("step_s", "step s", ".2f"),
            *((c, c, ".3f") for c in cols),
            ("mean_abs_diff", "mean|dlogp|", ".4f"), ("k3", "k3", ".2e")])  # fmt: skip
    for name in ("engine", "llm", "sync", "step", "trl"):
        got = sections.get(name)
        if isinstance(got, dict) and ("error" in got or name == "trl"):
            print(f"{name}: {got.get('error') or got}")


if __name__ == "__main__":
    main()

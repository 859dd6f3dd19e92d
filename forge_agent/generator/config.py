"""The generator's config (how to start the engine) and per-request sampling settings, as
plain data: importing them loads neither torch nor vLLM."""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from forge_agent.typed_config import check_field
from forge_agent.types import Completion

if TYPE_CHECKING:
    from forge_agent.trainer.config import LoraConfig

CPU_BLOCK_SIZE = 32
"""The smallest KV block vLLM's CPU attention takes (its default there is 128)."""
CPU_MAX_NUM_SEQS = 128
"""Sequences per engine step on CPU (`max_num_seqs: null` there)."""
OUTPUT_KINDS = ("auto", "cumulative", "final_only")


@dataclass
class GeneratorConfig:
    """How to start the engine (the model it serves, its dtype and seed are `VLLMEngine`'s
    arguments: the run's)."""

    max_model_len: int = 2048
    # null: eager on CPU; CUDA graphs on GPUs (issue 40, an H100: 14.1-14.5k tokens/s with
    # them, 5.6k eager)
    enforce_eager: bool | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    cpu_kv_cache_gb: float = 0.125  # KV cache size on the CPU build (GiB; fractions allowed)
    enable_prefix_caching: bool = True
    # KV-cache block, tokens; null: 32 on CPU, vLLM's default elsewhere. The prefix cache
    # keeps only full blocks: at vLLM's CPU default (128) a group's shared prompt and the
    # short turns of the CPU default are never reused, at 32 a group's G prompts are
    # prefilled once and each turn reuses the history before it.
    block_size: int | None = None
    # null: 128 on CPU; on GPUs vLLM's own defaults for it and its batched-token budget (its
    # `LLM` class's: 1,024 sequences and 16,384 tokens on an H100, where the engine context's
    # 2,048 tokens ran at 0.69x of `LLM.generate`)
    max_num_seqs: int | None = None
    # how vLLM hands a request's output back: "cumulative" (every step, the tokens so far:
    # what `in_flight` reports), "final_only" (once; streaming cumulative outputs cost 14-29%
    # on an H100); auto: cumulative on CPU, final_only on GPUs
    output_kind: str = "auto"
    # auto: on CPU with tensor_parallel_size 1, vLLM's worker runs inside its engine-core
    # process ("uni": one torch process less, and no worker queue polled for 1 s after each
    # message); otherwise vLLM's multiprocess executor ("mp")
    executor: str = "auto"
    # OpenMP threads of the CPU engine-core process between parallel regions: "passive" sleep
    # (the cores go to the trainer, controller and env workers), "active" spin, null: OpenMP's
    # default (spin a while, then sleep)
    omp_wait_policy: str | None = "passive"
    # auto: "inproc" where the executor is "uni" (CPU, one worker): vLLM's engine core runs in
    # the generator's own process, stepped by a thread (`generator.inproc`: one process and
    # one copy of torch and vLLM less, no socket hop per engine step); else "process":
    # AsyncLLM's engine-core process (on GPUs it overlaps the scheduler with the model)
    engine_core: str = "auto"
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to AsyncEngineArgs

    def __post_init__(self) -> None:
        check_field(self.max_model_len >= 16, "max_model_len", self.max_model_len, "an int >= 16")
        check_field(
            0.0 < self.gpu_memory_utilization <= 1.0,
            "gpu_memory_utilization",
            self.gpu_memory_utilization,
            "a fraction in (0, 1]",
        )
        check_field(
            self.tensor_parallel_size >= 1,
            "tensor_parallel_size",
            self.tensor_parallel_size,
            "an int >= 1",
        )
        seqs = self.max_num_seqs
        check_field(seqs is None or seqs >= 1, "max_num_seqs", seqs, "null or an int >= 1")
        check_field(
            self.output_kind in OUTPUT_KINDS,
            "output_kind",
            self.output_kind,
            " | ".join(OUTPUT_KINDS),
        )
        if self.block_size is not None:
            check_field(
                self.block_size >= 16 and self.block_size % 16 == 0,
                "block_size",
                self.block_size,
                "null or a multiple of 16 (of 32 on CPU)",
            )
        check_field(self.cpu_kv_cache_gb > 0, "cpu_kv_cache_gb", self.cpu_kv_cache_gb, "GiB > 0")
        check_field(
            self.executor in ("auto", "uni", "mp"), "executor", self.executor, "auto | uni | mp"
        )
        check_field(
            self.engine_core in ("auto", "inproc", "process"),
            "engine_core",
            self.engine_core,
            "auto | inproc | process",
        )
        policy = self.omp_wait_policy
        check_field(
            policy in (None, "active", "passive"),
            "omp_wait_policy",
            policy,
            "active | passive | null",
        )

    # Each `resolved_*` says what a null or auto setting stands for on CPU (`cpu` True) or
    # on GPUs (False); None: this machine (`on_cpu`).
    def resolved_block_size(self, cpu: bool | None = None) -> int | None:
        """The KV block `block_size: null` stands for: 32 on CPU, else vLLM's (None)."""
        if self.block_size is not None:
            return self.block_size
        return CPU_BLOCK_SIZE if _cpu(cpu) else None

    def resolved_executor(self, cpu: bool | None = None) -> str:
        """The executor `auto` stands for: "uni" on CPU with one worker, else "mp"."""
        if self.executor != "auto":
            return self.executor
        return "uni" if _cpu(cpu) and self.tensor_parallel_size == 1 else "mp"

    def resolved_engine_core(self, cpu: bool | None = None) -> str:
        """Where vLLM's engine core runs: "inproc" (this process) or "process" (its own)."""
        if self.engine_core != "auto":
            return self.engine_core
        return "inproc" if self.resolved_executor(cpu) == "uni" else "process"

    def resolved_enforce_eager(self, cpu: bool | None = None) -> bool:
        """`enforce_eager: null`: eager on CPU, CUDA graphs (False) on GPUs."""
        return _cpu(cpu) if self.enforce_eager is None else self.enforce_eager

    def resolved_max_num_seqs(self, cpu: bool | None = None) -> int | None:
        """`max_num_seqs: null`: 128 on CPU, vLLM's default (None) on GPUs."""
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        return CPU_MAX_NUM_SEQS if _cpu(cpu) else None

    def resolved_output_kind(self, cpu: bool | None = None) -> str:
        """`output_kind: auto`: "cumulative" on CPU, "final_only" on GPUs."""
        if self.output_kind != "auto":
            return self.output_kind
        return "cumulative" if _cpu(cpu) else "final_only"


@dataclass
class SamplingConfig:
    """Per-request sampling settings (a subset of vLLM's `SamplingParams`)."""

    max_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    prompt_logprobs: bool = False
    ignore_eos: bool = False  # keep sampling past end-of-sequence (benchmarks, tests)
    adapter: str | None = None  # the LoRA adapter that samples (trainer.lora.adapters; None: first)


GenerateFn = Callable[[list[int], SamplingConfig, str], Awaitable[Completion]]
"""The policy as a function: (prompt ids, sampling, session id) -> a completion. The generator
actor, a router over replicas, an in-process engine and a scripted policy all are one."""


def on_cpu() -> bool:
    """No CUDA device here, decided without initialising CUDA (torch is imported only when
    asked). `torch.cuda.device_count()` counts devices through NVML (0 on a torch built
    without CUDA); `torch.cuda.is_available()` asks the CUDA runtime instead, which
    initialises CUDA in this process, and a process forked after that (vLLM's engine core)
    fails: "Cannot re-initialize CUDA in forked subprocess". A torch built without a GPU
    backend (no libtorch_cuda or libtorch_hip in its lib folder: this machine's `+cpu` build)
    counts none, which is known without importing torch (0.15 GB of PSS in the driver,
    measured)."""
    if not _torch_gpu_build():
        return True
    import torch

    return torch.cuda.device_count() == 0


def _torch_gpu_build() -> bool:
    """Whether the installed torch may see a GPU (CUDA or ROCm libraries in its lib folder);
    True where that cannot be told (then torch is asked)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return True
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    if not lib.is_dir():
        return True
    return any(lib.glob("libtorch_cuda*")) or any(lib.glob("libtorch_hip*"))


def _cpu(cpu: bool | None) -> bool:
    return on_cpu() if cpu is None else cpu


class EngineOptions(TypedDict, total=False):
    """`VLLMEngine`'s keyword arguments, for what passes them through (the generator actor)."""

    dtype: str
    seed: int
    lora: LoraConfig | None
    colocate: str

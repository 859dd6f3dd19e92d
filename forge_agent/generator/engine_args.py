"""What vLLM starts with: the engine's keyword arguments and the environment it reads.

`engine_args` turns a `GeneratorConfig` into `AsyncEngineArgs` keywords (CPU KV cache size,
block size, whole prefills on CPU, LoRA slots); `engine_environ` and `engine_process_environ`
are the variables vLLM and its engine-core process read when they start. Pure functions of
the config (no vLLM import), so config checks (`run.setup_checks`) and tests use them without
starting an engine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from forge_agent.generator.config import GeneratorConfig, on_cpu
from forge_agent.trainer.config import LoraConfig


class GeneratorError(Exception):
    """A request or weight update the generator refused; the message names the problem."""


ONEDNN_CACHE_CAPACITY = 16
"""oneDNN primitives the CPU engine keeps (its default, 1024, grows the process by GBs)."""


def engine_environ(config: GeneratorConfig) -> dict[str, str]:
    """The environment vLLM reads at import, from `config` (set where the user has not)."""
    env = {"VLLM_LOGGING_LEVEL": "WARNING"}  # INFO logs per request and reload drown a run
    if config.resolved_executor() == "uni" or config.resolved_engine_core() == "inproc":
        # vLLM's CPU platform turns "uni" into "mp" unless V1 multiprocessing is off (AsyncLLM
        # still runs its engine core in a process of its own); LLMEngine (engine_core inproc)
        # keeps its engine core in this process only with it off
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if on_cpu():
        # oneDNN keeps a compiled primitive (with its buffers) per matmul shape, up to 1024;
        # the CPU engine sees a new token count almost every step, so the cache grew the
        # engine core by ~0.7 GB over a default run. A few recent shapes are the ones reused.
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(ONEDNN_CACHE_CAPACITY)
    return env


def engine_process_environ(config: GeneratorConfig) -> dict[str, str]:
    """The environment of the engine-core process vLLM starts, or with `engine_core` inproc
    of the generator's own proc (set when the proc starts, `run.placement`): OpenMP's wait
    policy on CPU, unless the user's environment sets one."""
    if config.omp_wait_policy is None or not on_cpu() or "OMP_WAIT_POLICY" in os.environ:
        return {}
    return {"OMP_WAIT_POLICY": config.omp_wait_policy.upper()}


@contextlib.contextmanager
def scoped_environ(values: dict[str, str]) -> Iterator[None]:
    """`values` in os.environ (what processes started meanwhile inherit), removed after."""
    os.environ.update(values)
    try:
        yield
    finally:
        for key in values:
            os.environ.pop(key, None)


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM accepts as `max_lora_rank` (an adapter's rank may be any value up to it)."""


def lora_engine_args(lora: LoraConfig | None) -> dict[str, Any]:
    """vLLM's LoRA arguments for serving adapters of `lora`'s rank ({} without LoRA): two slots
    per adapter of `lora.adapters`, so a new version loads while the old one is resident, and
    every adapter fits one batch."""
    if lora is None:
        return {}
    fits = [r for r in VLLM_LORA_RANKS if r >= lora.rank]
    if not fits:
        raise GeneratorError(
            f"trainer.lora.rank={lora.rank} is above vLLM's largest max_lora_rank "
            f"{VLLM_LORA_RANKS[-1]}; use a smaller rank or trainer.lora.sync=merged"
        )
    return {"enable_lora": True, "max_lora_rank": fits[0], "max_loras": 2 * len(lora.adapters)}


def engine_args(
    config: GeneratorConfig,
    model: str,
    dtype: str,
    seed: int,
    lora: LoraConfig | None = None,
    *,
    cpu: bool | None = None,
) -> dict[str, Any]:
    """The keyword arguments of vLLM's `AsyncEngineArgs` for `config` serving `model` (and
    adapters of `lora`'s shape when given), on CPU (`cpu` True), on GPUs (False) or here
    (None). On GPUs vLLM's own defaults stand where the config leaves a value null (its
    batched-token budget always: `engine_usage_context`)."""
    cpu = on_cpu() if cpu is None else cpu
    check_output_kind(config, cpu)
    if dtype == "auto":
        dtype = "float32" if cpu else "bfloat16"
    return dict(
        model=model,
        dtype=dtype,
        max_model_len=config.max_model_len,
        seed=seed,
        enforce_eager=config.resolved_enforce_eager(cpu),
        tensor_parallel_size=config.tensor_parallel_size,
        gpu_memory_utilization=config.gpu_memory_utilization,
        enable_prefix_caching=config.enable_prefix_caching,
        worker_extension_cls="forge_agent.generator.vllm_extension.WeightSyncExtension",
        disable_log_stats=True,
        **{
            **_unless_none("max_num_seqs", config.resolved_max_num_seqs(cpu)),
            "distributed_executor_backend": config.resolved_executor(cpu),
            **(_cpu_kv_cache(config.cpu_kv_cache_gb) if cpu else {}),
            **_unless_none("block_size", config.resolved_block_size(cpu)),
            **_cpu_whole_prefills(cpu),
            **lora_engine_args(lora),
            **config.engine_kwargs,
        },
    )


def engine_usage_context(cpu: bool | None = None) -> str:
    """The vLLM `UsageContext` the engine starts under, which picks vLLM's defaults for the
    batched-token budget and `max_num_seqs` where the arguments leave them out: on GPUs its
    `LLM` class's (the offline-throughput defaults `LLM.generate` runs at), on CPU the
    engine context's (unchanged)."""
    return "ENGINE_CONTEXT" if (on_cpu() if cpu is None else cpu) else "LLM_CLASS"


def _unless_none(key: str, value: Any) -> dict[str, Any]:
    return {} if value is None else {key: value}


def _cpu_whole_prefills(cpu: bool) -> dict[str, Any]:
    """On CPU, no chunked prefill: each prompt is prefilled in one engine step (vLLM then
    raises its token budget to at least max_model_len). A chunked prefill of a seeded request
    makes vLLM rewind the request's torch.Generator, which CPU generators cannot do ("CPU
    Generator does not use offset"): with many seeded requests in flight the engine died."""
    return {"enable_chunked_prefill": False} if cpu else {}


def _cpu_kv_cache(gib: float) -> dict[str, Any]:
    """The CPU build's KV cache size as an engine argument (`kv_cache_memory_bytes`, which
    takes fractions of a GiB, unlike the VLLM_CPU_KVCACHE_SPACE variable; a user's variable
    still wins). Not on GPUs, where `gpu_memory_utilization` sizes it."""
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return {}
    return {"kv_cache_memory_bytes": int(gib * 2**30)}


def check_output_kind(config: GeneratorConfig, cpu: bool) -> None:
    """The in-process engine core (`generator.inproc`) streams cumulative outputs: it ends an
    aborted request with the last one, which final-only outputs never send (an interrupted
    request would lose its tokens)."""
    kind, core = config.resolved_output_kind(cpu), config.resolved_engine_core(cpu)
    if kind == "final_only" and core == "inproc":
        raise GeneratorError(
            "generator.output_kind=final_only needs vLLM's engine-core process "
            "(generator.engine_core=process); the in-process engine core (inproc, the CPU "
            "default) streams cumulative outputs: set output_kind to cumulative or auto"
        )

"""The engine's arguments on CPU (unchanged by the GPU defaults) and on GPUs (chosen by the
H100 measurements of issue 40: CUDA graphs, vLLM's own batch limits, final-only outputs). Built
for either platform without one (`engine_args(..., cpu=...)`), from the run's default config."""

from __future__ import annotations

import inspect

from forge_agent.generator.engine_args import engine_args, engine_usage_context
from forge_agent.run.config import load_config

CPU_ARGS_BEFORE_ISSUE_40 = {
    "model": "M",
    "dtype": "float32",
    "max_model_len": 1024,
    "seed": 0,
    "enforce_eager": True,
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.85,
    "enable_prefix_caching": True,
    "max_num_seqs": 128,
    "worker_extension_cls": "forge_agent.generator.vllm_extension.WeightSyncExtension",
    "disable_log_stats": True,
    "distributed_executor_backend": "uni",
    "kv_cache_memory_bytes": 134217728,
    "block_size": 32,
    "enable_chunked_prefill": False,
}


def _default_args(cpu: bool) -> dict:
    cfg = load_config(None)
    return engine_args(cfg.generator, "M", cfg.model.dtype, cfg.seed, cpu=cpu)


def test_the_cpu_engine_args_of_the_default_config_are_unchanged():
    assert _default_args(cpu=True) == CPU_ARGS_BEFORE_ISSUE_40
    assert engine_usage_context(cpu=True) == "ENGINE_CONTEXT"
    assert load_config(None).generator.resolved_output_kind(cpu=True) == "cumulative"


def test_on_gpus_the_default_config_runs_cuda_graphs_at_vllms_own_batch_limits():
    args = _default_args(cpu=False)
    assert args["enforce_eager"] is False  # CUDA graphs: 14.1-14.5k tokens/s against 5.6k
    assert args["dtype"] == "bfloat16"
    # vLLM chooses max_num_seqs and the batched-token budget, as `LLM.generate` does
    assert "max_num_seqs" not in args and "max_num_batched_tokens" not in args
    assert engine_usage_context(cpu=False) == "LLM_CLASS"
    assert args["distributed_executor_backend"] == "mp"
    assert not {"kv_cache_memory_bytes", "block_size", "enable_chunked_prefill"} & set(args)


def test_on_gpus_the_engine_takes_each_requests_final_output_only():
    assert load_config(None).generator.resolved_output_kind(cpu=False) == "final_only"


def test_a_config_value_wins_over_the_platforms_default():
    cfg = load_config(
        None,
        ["generator.enforce_eager=true", "generator.max_num_seqs=256",
         "generator.output_kind=cumulative"],
    )  # fmt: skip
    args = engine_args(cfg.generator, "M", "auto", 0, cpu=False)
    assert args["enforce_eager"] is True and args["max_num_seqs"] == 256
    assert cfg.generator.resolved_output_kind(cpu=False) == "cumulative"


def test_every_gpu_engine_arg_is_one_vllm_takes():
    """Feature detection, not a pin: the names are fields of this vLLM's `AsyncEngineArgs`."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    fields = set(inspect.signature(AsyncEngineArgs).parameters)
    assert set(_default_args(cpu=False)) <= fields
    assert UsageContext[engine_usage_context(cpu=False)]

"""`generator.output_kind: final_only` (the GPU default) on the real CPU engine, run as on GPUs
(`AsyncLLM` with its engine-core process): vLLM hands back each request's output once, and a
request interrupted by a weight update still continues where it stopped (vLLM's abort output
carries the tokens sampled so far). The in-process CPU engine core streams cumulative outputs
only, and says so."""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge_agent.generator import GeneratorConfig, SamplingConfig
from forge_agent.generator.engine_args import GeneratorError
from forge_agent.generator.vllm_engine import VLLMEngine


def test_with_final_only_outputs_an_interrupted_request_continues_on_the_new_weights(
    tiny_model_path,
):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    torch.manual_seed(7)
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}

    async def run():
        config = GeneratorConfig(output_kind="final_only", engine_core="process")
        engine = VLLMEngine(config, str(tiny_model_path))
        await engine.start()
        try:
            short = await engine.generate([5, 6, 7], SamplingConfig(max_tokens=8, ignore_eos=True))
            sampling = SamplingConfig(max_tokens=600, ignore_eos=True, seed=3)
            running = asyncio.ensure_future(engine.generate([5, 6, 7], sampling))
            await asyncio.sleep(0.3)  # part of its tokens on the old weights
            await engine.update_weights(1, new, resume_in_flight=True)
            return short, await running
        finally:
            await engine.shutdown()

    short, c = asyncio.run(run())
    assert len(short.token_ids) == len(short.logprobs) == 8
    assert c.finish_reason == "length" and len(c.token_ids) == len(c.logprobs) == 600
    switch = c.versions.index(1)
    assert switch > 0 and set(c.versions[:switch]) == {0} and set(c.versions[switch:]) == {1}


def test_final_only_outputs_with_the_in_process_engine_core_are_refused_naming_the_key(
    tiny_model_path,
):
    config = GeneratorConfig(output_kind="final_only", engine_core="inproc")
    with pytest.raises(GeneratorError, match=r"generator\.output_kind=final_only"):
        asyncio.run(VLLMEngine(config, str(tiny_model_path)).start())

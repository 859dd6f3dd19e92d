"""The vLLM generator actor on CPU: parity with transformers, weight updates, bad input."""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge_agent.generator import GeneratorConfig, SamplingConfig

PARITY_BOUND = 1e-4  # fp32; measured about 5e-7 before and 2e-6 after an update


def _hf_prompt_logprobs(model, ids: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()  # [L, V]
    logps = logits.log_softmax(-1)
    return [logps[i - 1, ids[i]].item() for i in range(1, len(ids))]


def _vllm_prompt_logprobs(generator, ids: list[int]) -> list[float]:
    c = generator.generate.call_one(ids, SamplingConfig(max_tokens=1, prompt_logprobs=True)).get()
    assert c.prompt_logprobs is not None and c.prompt_logprobs[0] is None
    return c.prompt_logprobs[1:]


def _current_version(generator) -> int:
    return generator.version.call_one().get()


@pytest.fixture
def hf_model(policy_model_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(policy_model_path, dtype=torch.float32).eval()


@pytest.fixture
def fixed_ids(tiny_tokenizer) -> list[int]:
    text = "<|im_start|>user\nWhat is 12 * 34?<|im_end|>\n<|im_start|>assistant\n"
    return tiny_tokenizer.encode(text, add_special_tokens=False)


def test_prompt_logprobs_match_transformers_before_and_after_update(generator, hf_model, fixed_ids):
    original = {k: v.clone() for k, v in hf_model.state_dict().items()}
    diff0 = max(
        abs(a - b)
        for a, b in zip(
            _hf_prompt_logprobs(hf_model, fixed_ids),
            _vllm_prompt_logprobs(generator, fixed_ids),
            strict=True,
        )
    )
    torch.manual_seed(123)
    perturbed = {k: v + 0.05 * torch.randn_like(v) for k, v in original.items()}
    hf_model.load_state_dict(perturbed)
    version = _current_version(generator) + 1
    assert generator.update_weights.call_one(version, perturbed).get() == version
    ref = _hf_prompt_logprobs(hf_model, fixed_ids)
    got = _vllm_prompt_logprobs(generator, fixed_ids)
    diff1 = max(abs(a - b) for a, b in zip(ref, got, strict=True))
    print(f"parity max|dlogp|: initial {diff0:.2e}, after update {diff1:.2e}")
    assert diff0 <= PARITY_BOUND
    assert diff1 <= PARITY_BOUND
    # The update really changed the model (the check above is not vacuous).
    before = _hf_prompt_logprobs_orig(original, hf_model, fixed_ids)
    assert max(abs(a - b) for a, b in zip(ref, before, strict=True)) > 1e-3
    generator.update_weights.call_one(version + 1, original).get()


def _hf_prompt_logprobs_orig(original, hf_model, ids):
    current = {k: v.clone() for k, v in hf_model.state_dict().items()}
    hf_model.load_state_dict(original)
    out = _hf_prompt_logprobs(hf_model, ids)
    hf_model.load_state_dict(current)
    return out


def test_completions_carry_logprobs_and_version(generator, fixed_ids):
    version = _current_version(generator)
    c = generator.generate.call_one(fixed_ids, SamplingConfig(max_tokens=12, seed=1)).get()
    assert 1 <= len(c.token_ids) <= 12
    assert len(c.logprobs) == len(c.token_ids)
    assert all(lp <= 0.0 for lp in c.logprobs)
    assert c.policy_version == version
    assert c.finish_reason in ("stop", "length")


def test_many_concurrent_requests_all_complete(generator, fixed_ids):
    async def run():
        # past end-of-sequence: a warm-started policy may answer this prompt with the same
        # two tokens under every seed; 16 sampled tokens each tell the seeds apart
        sampling = [SamplingConfig(max_tokens=16, seed=i, ignore_eos=True) for i in range(16)]
        calls = [generator.generate.call_one(fixed_ids, s) for s in sampling]
        return await asyncio.gather(*calls)

    outs = asyncio.run(run())
    assert len(outs) == 16
    assert all(len(c.token_ids) == len(c.logprobs) > 0 for c in outs)
    assert len({tuple(c.token_ids) for c in outs}) > 1  # different seeds, different samples


def test_a_groups_shared_prompt_is_prefilled_once(generator, tiny_tokenizer):
    """G requests of one prompt (a GRPO group's first turn) sent together: vLLM's prefix
    cache serves all but one of them their prompt's full KV blocks (32 tokens on CPU; at the
    CPU build's default of 128 no block of such a prompt was ever reused)."""
    text = "<|im_start|>user\n" + " ".join(f"What is {i} * {i + 7}?" for i in range(12))
    ids = tiny_tokenizer.encode(text + "<|im_end|>\n<|im_start|>assistant\n")
    assert len(ids) >= 96

    async def run():
        sampling = [SamplingConfig(max_tokens=4, seed=i) for i in range(8)]
        return await asyncio.gather(*[generator.generate.call_one(ids, s) for s in sampling])

    outs = asyncio.run(run())
    full_blocks = len(ids) // 32 * 32
    assert sorted(c.cached_tokens for c in outs)[1:] == [full_blocks] * 7, [
        c.cached_tokens for c in outs
    ]


def test_block_size_must_be_a_multiple_of_16():
    from forge_agent.typed_config import ConfigError

    assert GeneratorConfig().resolved_block_size() == 32  # CPU
    assert GeneratorConfig(block_size=64).resolved_block_size() == 64
    with pytest.raises(ConfigError, match="block_size"):
        GeneratorConfig(block_size=20)


def test_in_flight_requests_finish_on_old_weights(generator, hf_model, fixed_ids):
    """A request running when an update arrives completes with the old version; later ones
    get the new version."""
    version = _current_version(generator)
    weights = {k: v.clone() for k, v in hf_model.state_dict().items()}

    async def run():
        in_flight = generator.generate.call_one(fixed_ids, SamplingConfig(max_tokens=200))
        await asyncio.sleep(0.05)
        update = generator.update_weights.call_one(version + 1, weights)
        old = await in_flight
        await update
        new = await generator.generate.call_one(fixed_ids, SamplingConfig(max_tokens=4))
        return old, new

    old, new = asyncio.run(run())
    assert old.policy_version == version
    assert new.policy_version == version + 1


def _error_text(call) -> str:
    with pytest.raises(Exception) as info:  # Monarch wraps the actor's exception
        call.get()
    return str(info.value)


def test_bad_input_gets_clear_errors_and_engine_keeps_serving(generator, hf_model, fixed_ids):
    assert "empty prompt" in _error_text(generator.generate.call_one([], SamplingConfig()))
    too_long = fixed_ids * 1000
    assert "does not fit the model's context" in _error_text(
        generator.generate.call_one(too_long, SamplingConfig())
    )
    version = _current_version(generator)
    sd = {k: v.clone() for k, v in hf_model.state_dict().items()}
    assert "not newer than the current version" in _error_text(
        generator.update_weights.call_one(version, sd)
    )
    missing = dict(sd)
    dropped = sorted(missing)[0]
    del missing[dropped]
    assert "missing" in _error_text(generator.update_weights.call_one(version + 1, missing))
    misshaped = dict(sd)
    name = "model.embed_tokens.weight"
    misshaped[name] = torch.zeros(3, 3)
    text = _error_text(generator.update_weights.call_one(version + 1, misshaped))
    assert name in text and "shape" in text
    # Still serving, still on the same version.
    c = generator.generate.call_one(fixed_ids, SamplingConfig(max_tokens=4)).get()
    assert c.policy_version == version and len(c.token_ids) > 0


def _vllm_engine_processes() -> list:
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.name().startswith("VLLM") or "VLLM::" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_the_cpu_engine_runs_inside_the_generators_own_process(generator, fixed_ids):
    """executor and engine_core auto on CPU: vLLM's engine core and its worker run in the
    generator actor's process (no engine-core or worker process of vLLM's, no socket hop per
    engine step), and it still serves and reloads (the tests above)."""
    generator.generate.call_one(fixed_ids, SamplingConfig(max_tokens=2)).get()
    assert _vllm_engine_processes() == []
    assert GeneratorConfig().resolved_engine_core() == "inproc"
    assert GeneratorConfig(engine_core="process").resolved_engine_core() == "process"
    with pytest.raises(ValueError, match="engine_core"):
        GeneratorConfig(engine_core="thread")


def test_the_cpu_engine_core_keeps_few_onednn_primitives(generator):
    """vLLM's worker (in the engine-core process) runs with oneDNN's primitive cache capped:
    its default of 1024 shapes grew the engine core by ~0.7 GB over a default run (a new token
    count almost every step)."""
    from forge_agent.generator.engine_args import ONEDNN_CACHE_CAPACITY

    name = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
    workers = generator.worker_environ.call_one([name]).get()
    assert workers == [{name: str(ONEDNN_CACHE_CAPACITY)}]


def test_64_seeded_requests_whose_prefills_overflow_one_batch_all_complete(
    generator, tiny_tokenizer
):
    """64 concurrent seeded requests of 600 distinct prompt tokens each: more than one batch
    of tokens, so vLLM would chunk a prefill, which its seeded CPU sampler cannot do ("CPU
    Generator does not use offset"). The seeds still hold: a request run again alone gives
    the same tokens."""
    vocab = len(tiny_tokenizer) - 8
    prompts = [[4 + (i * 131 + j * 7) % vocab for j in range(600)] for i in range(64)]

    async def run(indices):
        calls = [
            generator.generate.call_one(prompts[i], SamplingConfig(max_tokens=4, seed=i))
            for i in indices
        ]
        return await asyncio.gather(*calls)

    outs = asyncio.run(run(range(64)))
    assert all(len(c.token_ids) == len(c.logprobs) > 0 for c in outs)
    again = asyncio.run(run([5, 41]))
    assert [c.token_ids for c in again] == [outs[5].token_ids, outs[41].token_ids]


def test_omp_wait_policy_is_set_only_while_the_engine_processes_start(monkeypatch):
    """generator.omp_wait_policy reaches the processes started while vLLM starts (its engine
    core) and leaves the generator's own environment as it was; a user's setting wins."""
    import os
    import subprocess
    import sys

    from forge_agent.generator.engine_args import (
        GeneratorConfig,
        engine_process_environ,
        scoped_environ,
    )

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    child = [sys.executable, "-c", "import os; print(os.environ.get('OMP_WAIT_POLICY'))"]
    with scoped_environ(engine_process_environ(GeneratorConfig())):
        assert subprocess.run(child, capture_output=True, text=True).stdout.strip() == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in os.environ
    assert engine_process_environ(GeneratorConfig(omp_wait_policy=None)) == {}
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert engine_process_environ(GeneratorConfig()) == {}
    with pytest.raises(ValueError, match="omp_wait_policy"):
        GeneratorConfig(omp_wait_policy="sleepy")

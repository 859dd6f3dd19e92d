"""Partial rollouts on the real vLLM CPU engine: a request running when the weights change
continues on the new weights, and each token records the version that sampled it."""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge_agent.generator import SamplingConfig

PARITY_BOUND = 1e-4  # fp32 vLLM vs transformers (see test_generator.py)


@pytest.fixture
def hf_model(policy_model_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(policy_model_path, dtype=torch.float32).eval()


def _token_logprobs(model, prompt: list[int], tokens: list[int]) -> list[float]:
    ids = prompt + tokens
    with torch.no_grad():
        logps = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)  # [L, V]
    return [logps[len(prompt) + i - 1, t].item() for i, t in enumerate(tokens)]


async def _sampled_some(generator, n: int) -> None:
    """Wait until a running request has sampled at least `n` tokens."""
    for _ in range(6000):
        if any(k >= n for k in (await generator.in_flight.call_one()).values()):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"no request reached {n} tokens in 30 s")


def test_request_interrupted_by_an_update_continues_on_the_new_weights(
    generator, hf_model, tiny_tokenizer
):
    prompt = tiny_tokenizer.encode("<|im_start|>user\nCount.<|im_end|>\n<|im_start|>assistant\n")
    old = {k: v.clone() for k, v in hf_model.state_dict().items()}
    torch.manual_seed(7)
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in old.items()}
    v0 = generator.version.call_one().get()

    async def run():
        sampling = SamplingConfig(max_tokens=600, ignore_eos=True, seed=3)
        running = asyncio.ensure_future(generator.generate.call_one(prompt, sampling))
        await _sampled_some(generator, 20)  # part of its tokens on the old weights
        await generator.update_weights.call_one(v0 + 1, new, None, False, True)
        return await running

    try:
        c = asyncio.run(run())
    finally:
        generator.update_weights.call_one(v0 + 2, old).get()  # the shared engine: restore
    assert c.finish_reason == "length" and len(c.token_ids) == 600
    assert len(c.versions) == len(c.logprobs) == 600
    switch = c.versions.index(v0 + 1)  # tokens before came from v0, all after from v0 + 1
    assert switch > 0 and set(c.versions[:switch]) == {v0} and set(c.versions[switch:]) == {v0 + 1}
    assert c.policy_version == v0
    # each token's sampler logprob is its own version's: old weights before, new after
    ref_old = _token_logprobs(hf_model, prompt, c.token_ids)
    hf_model.load_state_dict(new)
    ref_new = _token_logprobs(hf_model, prompt, c.token_ids)
    hf_model.load_state_dict(old)
    before = max(abs(a - b) for a, b in zip(c.logprobs[:switch], ref_old[:switch], strict=True))
    after = max(abs(a - b) for a, b in zip(c.logprobs[switch:], ref_new[switch:], strict=True))
    print(f"interrupted at token {switch}/600; max|dlogp| old {before:.1e}, new {after:.1e}")
    assert before <= PARITY_BOUND and after <= PARITY_BOUND
    # and the two versions really differ on these tokens (the check above can fail)
    assert max(abs(a - b) for a, b in zip(ref_old, ref_new, strict=True)) > 1e-2


def test_drain_is_still_the_default_no_completion_mixes_versions(
    generator, hf_model, tiny_tokenizer
):
    prompt = tiny_tokenizer.encode("<|im_start|>user\nCount.<|im_end|>\n<|im_start|>assistant\n")
    same = {k: v.clone() for k, v in hf_model.state_dict().items()}
    v0 = generator.version.call_one().get()

    async def run():
        sampling = SamplingConfig(max_tokens=300, ignore_eos=True, seed=5)
        running = asyncio.ensure_future(generator.generate.call_one(prompt, sampling))
        await _sampled_some(generator, 20)
        await generator.update_weights.call_one(v0 + 1, same)  # sync mode: drain
        return await running

    c = asyncio.run(run())
    assert len(c.token_ids) == 300 and c.versions == [v0] * 300

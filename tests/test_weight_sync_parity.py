"""Trainer -> weight store -> generator: after a sync the sampler and the trainer agree, for
full fine-tuning and for LoRA (the trainer sends the base weights with its adapters merged, or
the adapters alone), through the default Monarch store and through the real TorchStore."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from forge_agent.generator import SamplingConfig
from forge_agent.trainer.config import LoraConfig
from forge_agent.trainer.core import Trainer, TrainerConfig
from forge_agent.types import Trajectory
from forge_agent.weights.store import WeightStoreConfig, make_weight_store
from tests.helpers import spawn_lora_generator, spawn_test_procs

PARITY_BOUND = 1e-4  # the generator parity test's bound (fp32)


def _fixed_trajectories(tokenizer) -> list[Trajectory]:
    """Two short episodes: the first rewarded, the second penalised."""
    trajs = []
    for text, advantage in (("What is 12 * 3? 36", 1.0), ("What is 12 * 3? 99", -1.0)):
        ids = tokenizer.encode(text, add_special_tokens=False)
        n = len(ids)
        mask = [0] * (n - 2) + [1, 1]
        trajs.append(
            Trajectory(
                task_id="fixed",
                group_id="fixed",
                token_ids=ids,
                loss_mask=mask,
                logprobs=[0.0] * n,
                versions=[0 if m else -1 for m in mask],
                advantage=advantage,
            )
        )
    return trajs


def _prompt_logprob_gap(generator, trajs, trainer_logprobs) -> float:
    """The largest |generator prompt logprob - trainer logprob| over `trajs`' tokens."""
    worst = 0.0
    for traj, lp in zip(trajs, trainer_logprobs, strict=True):
        c = generator.generate.call_one(
            traj.token_ids, SamplingConfig(max_tokens=1, prompt_logprobs=True)
        ).get()
        assert c.prompt_logprobs is not None
        sampled = torch.tensor(c.prompt_logprobs[1:])
        worst = max(worst, float((sampled - lp[1:]).abs().max()))
    return worst


@pytest.mark.parametrize(
    ("lora", "backend"),
    [(None, "monarch"), (LoraConfig(rank=4, alpha=8.0), "monarch"), (None, "torchstore")],
    ids=["full", "lora", "full-torchstore"],
)
def test_after_a_weight_sync_generator_logprobs_equal_the_trainers(
    generator, policy_model_path, tiny_tokenizer, lora, backend
):
    """Two synced versions (trained, then one more step), each served exactly."""
    trainer = Trainer(TrainerConfig(lr=1e-3, lora=lora), str(policy_model_path))
    original = {k: v.clone() for k, v in trainer.state_dict().items()}
    trajs = _fixed_trajectories(tiny_tokenizer)
    before = [lp.clone() for lp in trainer.compute_logprobs(trajs)]
    for traj, lp in zip(trajs, before, strict=True):  # on-policy sampler logprobs
        traj.logprobs = [float(x) if m else 0.0 for x, m in zip(lp, traj.loss_mask, strict=True)]
    for _ in range(3):
        trainer.train_step(trajs)
    after = trainer.compute_logprobs(trajs)
    rewarded, penalised = (after[i][-2:].sum() - before[i][-2:].sum() for i in (0, 1))
    assert rewarded > 0 > penalised  # the update moved probability the right way

    procs = spawn_test_procs(1)
    store = asyncio.run(make_weight_store(WeightStoreConfig(backend=backend), procs))
    start = generator.version.call_one().get()

    async def sync(version: int, state: dict[str, torch.Tensor]) -> None:
        await store.put(version, state)  # the generator pulls the version from the store
        await generator.update_weights.call_one(version, None, store)

    asyncio.run(sync(start + 1, trainer.state_dict()))
    worst = _prompt_logprob_gap(generator, trajs, after)
    print(f"{backend}: trainer vs generator max|dlogp| after sync 1: {worst:.2e}")
    assert worst <= PARITY_BOUND
    trainer.train_step(trajs)  # step two
    asyncio.run(sync(start + 2, trainer.state_dict()))
    worst = _prompt_logprob_gap(generator, trajs, trainer.compute_logprobs(trajs))
    print(f"{backend}: trainer vs generator max|dlogp| after sync 2: {worst:.2e}")
    assert worst <= PARITY_BOUND
    asyncio.run(sync(start + 3, original))  # leave the shared engine as it was
    asyncio.run(store.close())
    procs.stop().get()


@pytest.fixture(scope="module")
def lora_generator(policy_model_path):
    """A vLLM CPU engine serving the policy model plus LoRA adapters of rank <= 8."""
    procs = spawn_test_procs(1)
    gen = spawn_lora_generator(
        procs, "lora_generator", policy_model_path, LoraConfig(rank=4, alpha=8.0)
    )
    yield gen
    gen.shutdown.call_one().get()
    procs.stop().get()


@pytest.mark.parametrize("backend", ["monarch", "torchstore"])
def test_an_adapter_sync_moves_only_adapters_and_vllm_serves_the_trainers_policy(
    lora_generator, policy_model_path, tiny_tokenizer, backend
):
    """Each version is a new vLLM LoRA built from the adapter tensors alone; the sampler's
    logprobs equal the trainer's after every sync, and the previous adapter is removed.
    (Sampled tokens' logprobs: prompt logprobs under a LoRA are refused, see the engine.)"""
    lora = LoraConfig(rank=4, alpha=8.0)
    trainer = Trainer(TrainerConfig(lr=1e-3, lora=lora), str(policy_model_path))
    trajs = _fixed_trajectories(tiny_tokenizer)
    for traj, lp in zip(trajs, trainer.compute_logprobs(trajs), strict=True):
        traj.logprobs = [float(x) if m else 0.0 for x, m in zip(lp, traj.loss_mask, strict=True)]
    procs = spawn_test_procs(1)
    store = asyncio.run(make_weight_store(WeightStoreConfig(backend=backend), procs))
    full_bytes = sum(v.numel() * v.element_size() for v in trainer.state_dict().values())

    def worst_gap() -> float:
        """vLLM's logprobs of the tokens it sampled vs the trainer's on the same tokens."""
        sampled = []
        for i, traj in enumerate(trajs):
            c = lora_generator.generate.call_one(
                traj.token_ids, SamplingConfig(max_tokens=8, seed=i, ignore_eos=True)
            ).get()
            ids = traj.token_ids + c.token_ids
            n = len(traj.token_ids)
            episode = Trajectory(
                task_id="s",
                group_id="s",
                token_ids=ids,
                loss_mask=[0] * n + [1] * len(c.token_ids),
                logprobs=[0.0] * len(ids),
            )
            sampled.append((episode, torch.tensor(c.logprobs), n))
        trainer_lps = trainer.compute_logprobs([e for e, _, _ in sampled])
        return max(
            float((lp[n:] - vllm_lp).abs().max())
            for (_, vllm_lp, n), lp in zip(sampled, trainer_lps, strict=True)
        )

    start = lora_generator.version.call_one().get()  # the module's engine: 0 or the last run's
    if start == 0:
        assert worst_gap() <= PARITY_BOUND  # version 0: the base model, no adapter yet
    for version in (start + 1, start + 2):
        for _ in range(2):
            trainer.train_step(trajs)
        adapter = trainer.sync_state_dict()
        assert all(".lora_A." in k or ".lora_B." in k for k in adapter)
        assert sum(v.numel() * v.element_size() for v in adapter.values()) < 0.02 * full_bytes
        asyncio.run(store.put(version, adapter))
        assert lora_generator.update_weights.call_one(version, None, store).get() == version
        gap = worst_gap()
        print(f"LoRA v{version}: trainer vs vLLM adapter max|dlogp| {gap:.2e}")
        assert gap <= PARITY_BOUND
    removed = list(Path("/dev/shm").glob(f"forge-lora-*-{start + 1}-*"))
    assert removed == []  # the first version's adapter is gone
    asyncio.run(store.close())
    procs.stop().get()

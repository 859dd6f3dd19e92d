"""Trainer -> weight store -> generator: after a sync the sampler and the trainer agree."""

from __future__ import annotations

import asyncio

import torch

from forge_agent.generator import SamplingConfig
from forge_agent.trainer.core import Trainer, TrainerConfig
from forge_agent.types import Trajectory
from forge_agent.weights.store import MonarchWeightStore
from tests.helpers import spawn_test_procs

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


def test_after_a_weight_sync_generator_logprobs_equal_the_trainers(
    generator, policy_model_path, tiny_tokenizer
):
    trainer = Trainer(TrainerConfig(lr=1e-3), str(policy_model_path))
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
    store = asyncio.run(MonarchWeightStore.spawn(procs))
    start = generator.version.call_one().get()

    async def sync(version: int, state: dict[str, torch.Tensor]) -> None:
        await store.put(version, state)  # the generator pulls the version from the store
        await generator.update_weights.call_one(version, None, store)

    asyncio.run(sync(start + 1, trainer.state_dict()))
    worst = 0.0
    for traj, lp in zip(trajs, after, strict=True):
        c = generator.generate.call_one(
            traj.token_ids, SamplingConfig(max_tokens=1, prompt_logprobs=True)
        ).get()
        assert c.prompt_logprobs is not None
        sampled = torch.tensor(c.prompt_logprobs[1:])
        worst = max(worst, float((sampled - lp[1:]).abs().max()))
    print(f"trainer vs generator max|dlogp| after sync: {worst:.2e}")
    assert worst <= PARITY_BOUND
    asyncio.run(sync(start + 2, original))  # leave the shared engine as it was
    procs.stop().get()

"""A model that ties its embeddings (Qwen3-0.6B, 1.7B, 4B do): its LM head is the input
embedding under a second name, `lm_head.weight`. The trainer sends it once, the generator
accepts a state dict that still carries it, and after a sync the engine's logprobs equal the
trainer's (the CPU build's packed copy of the LM head is re-prepared after the reload)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge_agent.generator import GeneratorConfig, SamplingConfig
from forge_agent.models.config import TinyModelConfig
from forge_agent.models.tiny import ensure_tiny_model
from forge_agent.trainer.core import Trainer, TrainerConfig
from forge_agent.types import Trajectory
from forge_agent.weights.layout import TIED_HEAD
from forge_agent.weights.store import MonarchWeightStore
from tests.helpers import SlotOnly, spawn_test_procs

PARITY_BOUND = 1e-4  # fp32, as tests/test_weight_sync_parity.py


@pytest.fixture(scope="module")
def tied_model_path():
    return ensure_tiny_model(TinyModelConfig(tie_word_embeddings=True))


@pytest.fixture(scope="module")
def tied_generator(tied_model_path):
    """A vLLM CPU engine serving the tied tiny model, in a Monarch actor, and a weight store."""
    from forge_agent.generator import Generator

    procs = spawn_test_procs(1)
    gen = procs.spawn("tied_generator", Generator, GeneratorConfig(), str(tied_model_path))
    gen.setup.call_one().get()
    store = asyncio.run(MonarchWeightStore.spawn(procs, name="ws_tied"))
    yield gen, store, procs
    gen.shutdown.call_one().get()
    procs.stop().get()


def _trajectories() -> list[Trajectory]:
    """Two fixed episodes of 24 tokens, the first rewarded, the second penalised."""
    out = []
    for i, advantage in enumerate((1.0, -1.0)):
        ids = [(7 * i + 13 * j + 5) % 900 + 20 for j in range(24)]
        mask = [0] * 20 + [1] * 4
        out.append(
            Trajectory(
                task_id="t",
                group_id="g",
                token_ids=ids,
                loss_mask=mask,
                logprobs=[0.0] * 24,
                advantage=advantage,
            )
        )
    return out


def _trained(path) -> Trainer:
    """A trainer three steps away from the model the engine started with (the embedding, and
    so the tied LM head, moved)."""
    trainer = Trainer(TrainerConfig(lr=1e-2), str(path))
    for _ in range(3):
        trainer.train_step(_trajectories())
    return trainer


def _worst_gap(generator, trainer: Trainer) -> float:
    """max |prompt logprob| difference, engine vs trainer, over the fixed episodes."""
    trajs = _trajectories()
    worst = 0.0
    for traj, lp in zip(trajs, trainer.compute_logprobs(trajs), strict=True):
        c = generator.generate.call_one(
            traj.token_ids, SamplingConfig(max_tokens=1, prompt_logprobs=True)
        ).get()
        worst = max(worst, float((torch.tensor(c.prompt_logprobs[1:]) - lp[1:]).abs().max()))
    return worst


def test_a_tied_models_trainer_sends_the_lm_head_once(tied_model_path):
    trainer = Trainer(TrainerConfig(), str(tied_model_path))
    full = trainer.state_dict()
    assert full[TIED_HEAD].data_ptr() == full["model.embed_tokens.weight"].data_ptr()
    assert set(trainer.sync_state_dict()) == set(full) - {TIED_HEAD}


def test_a_state_dict_carrying_the_tied_head_syncs_through_the_store(
    tied_generator, tied_model_path
):
    """The store's shared-memory path, given the whole state dict (`lm_head.weight` too)."""
    generator, store, _ = tied_generator
    trainer = _trained(tied_model_path)
    assert _worst_gap(generator, trainer) > 0.1  # the engine still serves the old weights
    version = generator.version.call_one().get() + 1
    asyncio.run(store.put(version, trainer.state_dict()))
    assert generator.update_weights.call_one(version, None, store).get() == version
    gap = _worst_gap(generator, trainer)
    print(f"tied model, store sync: trainer vs engine max|dlogp| {gap:.2e}")
    assert gap <= PARITY_BOUND


def test_a_state_dict_carrying_the_tied_head_syncs_directly(tied_generator, tied_model_path):
    """The direct path (a state dict handed to the generator), after a second training."""
    generator, _, _ = tied_generator
    trainer = _trained(tied_model_path)
    for _ in range(3):
        trainer.train_step(_trajectories())
    version = generator.version.call_one().get() + 1
    generator.update_weights.call_one(version, trainer.state_dict()).get()
    gap = _worst_gap(generator, trainer)
    print(f"tied model, direct sync: trainer vs engine max|dlogp| {gap:.2e}")
    assert gap <= PARITY_BOUND


def test_a_colocated_store_syncs_the_engine_from_the_trainers_slot(tied_generator, tied_model_path):
    """The store's device transport (`services.colocate`), on CPU through its named stand-in
    (the slot in host shared memory, not GPU memory): this process puts, the generator's vLLM
    worker, in another process, opens the slot by its handle and loads from it."""
    generator, _, procs = tied_generator
    trainer = _trained(tied_model_path)
    for _ in range(6):
        trainer.train_step(_trajectories())
    assert _worst_gap(generator, trainer) > 0.1  # the engine still serves the old weights

    async def put(version: int) -> tuple[MonarchWeightStore, object]:
        store = await MonarchWeightStore.spawn(procs, name="ws_tied_device", transport="device")
        await store.put(version, trainer.state_dict())
        return store, await store.shared_view(version)

    version = generator.version.call_one().get() + 1
    store, shared = asyncio.run(put(version))
    try:
        assert shared is None  # nothing in the store's shared memory: the slot is the trainer's
        slot_only = SlotOnly(store)  # no `get`: the generator cannot pull the tensors itself
        assert generator.update_weights.call_one(version, None, slot_only).get() == version
        gap = _worst_gap(generator, trainer)
    finally:
        asyncio.run(store.close())
    print(f"tied model, colocated store sync: trainer vs engine max|dlogp| {gap:.2e}")
    assert gap <= PARITY_BOUND

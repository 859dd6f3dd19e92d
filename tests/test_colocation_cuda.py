"""Colocation on a real GPU (skips without one; run on the GPU machine): vLLM's sleep mode
frees the card for the trainer, and the new weights load from the trainer's device memory
through CUDA IPC handles (no host copy), after which the engine's logprobs equal the
trainer's. On CPU the same order runs through `SleepStandin` (tests/test_colocation.py), and
the weight store's device transport through its host stand-in (tests/test_weight_store.py,
tests/test_tied_embeddings.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import torch

from forge_agent.generator import GeneratorConfig, SamplingConfig
from forge_agent.generator.vllm_engine import VLLMEngine
from forge_agent.models.config import TinyModelConfig
from forge_agent.models.tiny import ensure_tiny_model
from forge_agent.types import Trajectory
from forge_agent.weights.device_slots import DeviceSlots

PARITY_BOUND = 1e-3  # fp32 on a GPU (TF32-free kernels are not guaranteed on either side)


def test_on_one_gpu_the_engine_sleeps_then_loads_the_trainers_weights_from_device_memory():
    if torch.cuda.device_count() == 0:
        pytest.skip("no CUDA device")
    from forge_agent.trainer.core import Trainer, TrainerConfig

    path = ensure_tiny_model(TinyModelConfig(tie_word_embeddings=True))
    ids = list(range(30, 54))
    traj = Trajectory(task_id="t", group_id="g", token_ids=ids, loss_mask=[0] * 20 + [1] * 4,
                      logprobs=[0.0] * 24, advantage=1.0)  # fmt: skip

    async def run() -> tuple[list, torch.Tensor, float, dict]:
        config = GeneratorConfig(gpu_memory_utilization=0.3, max_model_len=256)
        engine = VLLMEngine(config, str(path), dtype="float32", colocate="sleep")
        await engine.start()  # before this process touches CUDA (vLLM forks its engine core)
        try:
            trainer = Trainer(TrainerConfig(lr=1e-2), str(path), dtype="float32")
            free_awake = torch.cuda.mem_get_info()[0]
            await engine.sleep(1)
            freed = torch.cuda.mem_get_info()[0] - free_awake
            for _ in range(3):
                trainer.train_step([traj])
            await engine.wake_up(["weights"])
            await engine.update_weights(1, trainer.sync_state_dict())
            await engine.wake_up(["kv_cache"])
            c = await engine.generate(ids, SamplingConfig(max_tokens=1, prompt_logprobs=True))
            lp = trainer.compute_logprobs([traj])[0].float().cpu()
            return c.prompt_logprobs, lp, freed, engine.last_reload[0]
        finally:
            await engine.shutdown()

    sampled, trainer_lp, freed, reload = asyncio.run(run())
    assert freed > 0.1 * torch.cuda.mem_get_info()[1]  # asleep: most of vLLM's 30% handed back
    assert reload["tensors"] > 0  # loaded from CUDA IPC handles (the colocated path)
    gap = float((torch.tensor(sampled[1:]) - trainer_lp[1:]).abs().max())
    print(f"colocated CUDA IPC sync: engine vs trainer max|dlogp| {gap:.2e}, reload {reload}")
    assert gap <= PARITY_BOUND


def test_a_store_slot_in_gpu_memory_is_read_in_place_by_another_process():
    """The weight store's device transport (`weights.device_slots`): a slot of this process's
    GPU memory, opened by its CUDA IPC handle in a fresh process (as vLLM's worker opens it)."""
    if torch.cuda.device_count() == 0:
        pytest.skip("no CUDA device")
    slots = DeviceSlots(1)
    buf, handle = slots.slot_for(1, 1 << 20, torch.device("cuda", 0), kept=set())
    buf.copy_(torch.arange(1 << 20, device="cuda") % 251)
    torch.cuda.synchronize()
    reader = (
        "import sys; from forge_agent.weights.device_slots import open_slot; "
        "b = open_slot(sys.stdin.buffer.read()); print(int(b.sum()), b.device.type, b.data_ptr())"
    )
    got = subprocess.run(
        [sys.executable, "-c", reader], input=handle, capture_output=True, check=True
    )
    total, device, _ = got.stdout.decode().split()
    assert (int(total), device) == (int(buf.sum()), "cuda")
    slots.close()


def test_on_one_gpu_the_engine_loads_a_store_version_from_the_trainers_gpu_slot():
    """What a colocated run does each step: the trainer puts into the device transport's slot,
    the engine loads from it by `update_weights_shared(store.device_view(...))`."""
    if torch.cuda.device_count() == 0:
        pytest.skip("no CUDA device")
    from monarch.actor import this_proc

    from forge_agent.trainer.core import Trainer, TrainerConfig
    from forge_agent.weights.store import MonarchWeightStore

    path = ensure_tiny_model(TinyModelConfig(tie_word_embeddings=True))
    ids = list(range(30, 54))
    traj = Trajectory(task_id="t", group_id="g", token_ids=ids, loss_mask=[0] * 20 + [1] * 4,
                      logprobs=[0.0] * 24, advantage=-1.0)  # fmt: skip

    async def run() -> tuple[list, torch.Tensor, dict]:
        config = GeneratorConfig(gpu_memory_utilization=0.3, max_model_len=256)
        engine = VLLMEngine(config, str(path), dtype="float32", colocate="sleep")
        await engine.start()
        store = await MonarchWeightStore.spawn(this_proc(), name="ws_cuda", transport="device")
        try:
            trainer = Trainer(TrainerConfig(lr=1e-2), str(path), dtype="float32")
            for _ in range(3):
                trainer.train_step([traj])
            await store.put(1, trainer.sync_state_dict())
            await engine.update_weights_shared(await store.device_view(1))
            c = await engine.generate(ids, SamplingConfig(max_tokens=1, prompt_logprobs=True))
            lp = trainer.compute_logprobs([traj])[0].float().cpu()
            return c.prompt_logprobs, lp, engine.last_reload[0]
        finally:
            await store.close()
            await engine.shutdown()

    sampled, trainer_lp, reload = asyncio.run(run())
    assert reload["tensors"] > 0
    gap = float((torch.tensor(sampled[1:]) - trainer_lp[1:]).abs().max())
    print(f"colocated store (GPU slot) sync: engine vs trainer max|dlogp| {gap:.2e}, {reload}")
    assert gap <= PARITY_BOUND

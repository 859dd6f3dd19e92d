"""Colocation on a real GPU (skips without one; run on the GPU machine): vLLM's sleep mode
frees the card for the trainer, and the new weights load from the trainer's device memory
through CUDA IPC handles (no host copy), after which the engine's logprobs equal the
trainer's. On CPU the same order runs through `SleepStandin` (tests/test_colocation.py)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge_agent.generator import GeneratorConfig, SamplingConfig
from forge_agent.generator.engine import VLLMEngine
from forge_agent.models.tiny import TinyModelConfig, ensure_tiny_model
from forge_agent.types import Trajectory

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

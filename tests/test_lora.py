"""LoRA training (`trainer.lora`): adapters only in the optimizer, the reference policy is the
base with adapters off, merged weights for the sync, peft-format checkpoints that resume, and
bad input refused before any actor starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from forge_agent.run.config import ConfigError, load_config
from forge_agent.trainer.config import LoraConfig, TrainerConfig
from forge_agent.types import Trajectory

LOGP_ATOL = 1e-5  # fp32: merged weights vs adapters applied at run time


def _trajectories(tokenizer) -> list[Trajectory]:
    """A rewarded and a penalised answer to one prompt."""
    out = []
    for text, advantage in (("What is 12 * 3? 36", 1.0), ("What is 12 * 3? 99", -1.0)):
        ids = tokenizer.encode(text, add_special_tokens=False)
        mask = [0] * (len(ids) - 2) + [1, 1]
        out.append(
            Trajectory(
                task_id="t",
                group_id="g",
                token_ids=ids,
                loss_mask=mask,
                logprobs=[0.0] * len(ids),
                versions=[0 if m else -1 for m in mask],
                advantage=advantage,
            )
        )
    return out


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def _lora_config(**loss) -> TrainerConfig:
    cfg = TrainerConfig(lr=1e-3, lora=LoraConfig(rank=4, alpha=8.0))
    for key, value in loss.items():
        setattr(cfg.loss, key, value)
    return cfg


@pytest.fixture(scope="module")
def trained(tiny_model_path, tiny_tokenizer, tmp_path_factory):
    """A LoRA trainer (KL on) after 3 steps, its logprobs before and after, and a checkpoint."""
    from forge_agent.trainer.core import Trainer

    trainer = Trainer(_lora_config(kl_coef=0.1), str(tiny_model_path), tokenizer=tiny_tokenizer)
    base = {k: v.clone() for k, v in trainer.state_dict().items()}
    trajs = _trajectories(tiny_tokenizer)
    before = trainer.compute_logprobs(trajs)
    for traj, lp in zip(trajs, before, strict=True):  # on-policy sampler logprobs
        traj.logprobs = [float(x) for x in lp]
    metrics = [trainer.train_step(trajs) for _ in range(3)]
    checkpoint = trainer.save_checkpoint(tmp_path_factory.mktemp("lora") / "step_3", {"at": 3})
    after = trainer.compute_logprobs(trajs)
    return SimpleNamespace(
        trainer=trainer,
        trajs=trajs,
        base=base,
        before=before,
        after=after,
        metrics=metrics,
        checkpoint=checkpoint,
    )


# ------------------------------------------------------------------ config: bad input
@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("trainer.lora.rank=0", "trainer.lora.rank=0"),
        ("trainer.lora.rank=-4", "trainer.lora.rank=-4"),
        ("trainer.lora.dropout=1.0", "trainer.lora.dropout"),
        ("trainer.lora.rnk=4", "did you mean 'trainer.lora.rank'"),
    ],
)
def test_bad_lora_values_fail_naming_the_key(override, names):
    with pytest.raises(ConfigError, match=names.replace(".", r"\.").replace("(", r"\(")):
        load_config(None, [override])


def test_lora_with_the_titan_backend_is_refused():
    with pytest.raises(ConfigError, match=r"trainer\.backend='titan'.*trainer\.lora"):
        load_config(None, ["trainer.lora.rank=8", "trainer.backend=titan"])


def test_one_key_turns_lora_on_and_null_turns_it_off():
    assert load_config(None, []).trainer.lora is None
    on = load_config(None, ["trainer.lora.rank=8"]).trainer.lora
    assert on == LoraConfig(rank=8)
    assert load_config(None, ["trainer.lora.rank=8", "trainer.lora=null"]).trainer.lora is None


def test_an_unknown_target_module_fails_before_any_actor_listing_the_linear_modules():
    from forge_agent.errors import SetupError
    from forge_agent.run.setup_checks import check_lora

    cfg = load_config(None, ["trainer.lora={rank: 4, target_modules: [q_proj, qkv]}"])
    with pytest.raises(SetupError, match=r"\['qkv'\].*\['down_proj', 'gate_proj', 'k_proj'"):
        check_lora(cfg, None)


def test_resuming_a_checkpoint_of_the_other_kind_fails_before_any_actor(tmp_path):
    from forge_agent.errors import SetupError
    from forge_agent.run.setup_checks import check_lora

    policy = tmp_path / "checkpoints" / "step_000010" / "policy"
    policy.mkdir(parents=True)
    (policy.parent / "COMPLETE").write_text("step 10\n")
    (policy / "adapter_config.json").write_text('{"r": 4, "target_modules": ["q_proj"]}')
    full = load_config(None, [f"output_dir={tmp_path}", "resume=true"])
    with pytest.raises(SetupError, match=r"LoRA adapter \(rank 4\).*trainer\.lora is null"):
        check_lora(full, None)
    other_rank = load_config(None, [f"output_dir={tmp_path}", "resume=true", "trainer.lora.rank=8"])
    with pytest.raises(SetupError, match="rank 4 on"):
        check_lora(other_rank, None)
    (policy / "adapter_config.json").unlink()
    (policy / "config.json").write_text("{}")
    with pytest.raises(SetupError, match=r"full weights but trainer\.lora is set"):
        check_lora(other_rank, None)


# ------------------------------------------------------------------ training
def test_the_optimizer_holds_only_the_adapters_and_the_base_weights_stay(trained):
    t = trained
    in_optimizer = {id(p) for g in t.trainer.optimizer.param_groups for p in g["params"]}
    names = [n for n, p in t.trainer.model.named_parameters() if id(p) in in_optimizer]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    frozen = {n: p for n, p in t.trainer.model.named_parameters() if ".base_layer." in n}
    key = next(iter(frozen))
    plain = key.removeprefix("base_model.model.").replace(".base_layer.", ".")
    assert torch.equal(frozen[key], t.base[plain])  # the base's copy of an adapted layer
    rewarded, penalised = (t.after[i][-2:].sum() - t.before[i][-2:].sum() for i in (0, 1))
    assert rewarded > 0 > penalised  # the adapters moved probability the right way


def test_the_kl_reference_is_the_base_model_with_adapters_off(trained):
    t = trained
    assert t.metrics[0]["loss/kl"] == 0.0  # step 1: B = 0, policy = base
    assert t.metrics[-1]["loss/kl"] > 0.0
    with t.trainer._reference() as reference:
        assert reference is t.trainer.model  # no second model
        ref = [lp.clone() for lp in t.trainer.compute_logprobs(t.trajs)]
    assert _max_diff(ref, t.before) <= LOGP_ATOL  # adapters off = the untrained base
    assert _max_diff(t.trainer.compute_logprobs(t.trajs), t.after) == 0.0  # and back on after


def test_synced_weights_are_the_base_with_the_adapters_merged(trained, tiny_model_path):
    from transformers import AutoModelForCausalLM

    from forge_agent.trainer.core import Trainer

    t = trained
    merged = t.trainer.state_dict()
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert set(merged) == set(plain.state_dict())  # the base layout: the generator loads it
    plain.load_state_dict(merged)
    again = Trainer(TrainerConfig(), plain).compute_logprobs(t.trajs)
    assert _max_diff(again, t.after) <= LOGP_ATOL
    adapter = t.trainer.adapter_state_dict()
    assert adapter and all("lora_" in k for k in adapter)
    ratio = sum(v.numel() for v in adapter.values()) / sum(v.numel() for v in merged.values())
    assert ratio < 0.02  # what an adapter sync would move


def test_the_checkpoint_is_a_peft_adapter_that_loads_with_peft_and_merges(
    trained, tiny_model_path, tmp_path
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from apps.export.__main__ import main as export_main
    from forge_agent.trainer.core import Trainer

    t = trained
    policy = t.checkpoint / "policy"
    assert (policy / "adapter_config.json").exists()
    assert not (policy / "model.safetensors").exists()  # adapters only
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_path), str(policy)
    )
    merged = peft_model.merge_and_unload().requires_grad_(True)  # peft froze the base
    loaded = Trainer(TrainerConfig(), merged).compute_logprobs(t.trajs)
    assert _max_diff(loaded, t.after) <= LOGP_ATOL
    assert export_main([str(t.checkpoint), "--out", str(tmp_path / "merged"), "--merge"]) == 0
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    again = Trainer(TrainerConfig(), exported).compute_logprobs(t.trajs)
    assert _max_diff(again, t.after) <= LOGP_ATOL


def test_resume_continues_adapters_optimizer_and_version_and_refuses_full_weights(
    trained, tiny_model_path
):
    from forge_agent.trainer.core import Trainer

    t = trained
    resumed = Trainer(_lora_config(kl_coef=0.1), str(tiny_model_path))
    assert resumed.load_checkpoint(t.checkpoint) == {"at": 3}
    assert resumed.policy_version == t.trainer.policy_version == 3
    assert _max_diff(resumed.compute_logprobs(t.trajs), t.after) == 0.0
    saved = t.trainer.optimizer.state_dict()["state"]
    restored = resumed.optimizer.state_dict()["state"]
    assert saved.keys() == restored.keys()
    assert all(torch.equal(saved[i]["exp_avg"], restored[i]["exp_avg"]) for i in saved)
    with pytest.raises(ValueError, match=r"LoRA adapter \(rank 4\).*trainer\.lora is null"):
        Trainer(TrainerConfig(), str(tiny_model_path)).load_checkpoint(t.checkpoint)


# ------------------------------------------------------------------ a whole run
def test_a_lora_run_on_two_fsdp_ranks_syncs_adapters_and_checkpoints_one(
    policy_model_path, tmp_path
):
    """`trainer.lora.rank` is all a user sets: the trainer ranks shard the adapted model
    (FSDP2), each step's adapters reach vLLM as a new LoRA (the run's policy versions advance
    with every sync), and the checkpoint is a peft adapter (resume: the trainer tests above)."""
    import asyncio
    import json

    from forge_agent.run.controller import train
    from tests.test_controller import _short_overrides

    out = tmp_path / "run"
    overrides = [*_short_overrides(policy_model_path, out), "services.trainer.procs=2"]
    overrides += ["eval.every=0", "checkpoint.every=2", "training.steps=2"]
    summary = asyncio.run(train(load_config(None, [*overrides, "trainer.lora={rank: 4}"])))
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    policy = out / "checkpoints" / "step_000002" / "policy"
    assert (policy / "adapter_config.json").exists()
    assert not (policy / "model.safetensors").exists()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]

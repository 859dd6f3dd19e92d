"""Typed config: YAML files, `defaults:` inheritance, key=value overrides and their errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from forge_agent.hosts.config import GeneratorPlacement, TrainerPlacement
from forge_agent.run.config import (
    AgentConfig,
    ConfigError,
    LossConfig,
    TrainingConfig,
    dump_yaml,
    from_dict,
    load_config,
    parse_cli,
    to_dict,
)

AGENT_DIR = Path(__file__).resolve().parents[1] / "apps" / "agent"
SHIPPED = sorted(p.name for p in AGENT_DIR.glob("*.yaml"))  # every run config shipped


# ---------------------------------------------------------------- defaults and shipped files
def test_no_path_and_no_overrides_gives_the_dataclass_defaults():
    cfg = load_config(None, [])
    assert cfg == AgentConfig()
    assert cfg.model.name == "tiny"
    assert cfg.services.env.num_replicas == 0  # env workers: 1 per core, 32 envs each
    assert cfg.services.env.count() == len(os.sched_getaffinity(0))
    assert cfg.services.env.envs_per_worker == 32
    assert cfg.services.generator.num_replicas == 1


def test_default_yaml_equals_the_dataclass_defaults():
    assert load_config(AGENT_DIR / "default.yaml") == AgentConfig()


def test_default_yaml_writes_out_every_key_with_its_default_value():
    """Every key is written; a null loss field is the preset's value (`trainer.loss.name`)."""

    def same(written, default, where=""):
        if isinstance(default, dict) and where not in FREE_FORM:
            assert set(written) == set(default), where
            for key in default:
                same(written[key], default[key], f"{where}.{key}".lstrip("."))
        elif not (where.startswith("trainer.loss.") and written is None):
            assert written == default, where

    same(yaml.safe_load((AGENT_DIR / "default.yaml").read_text()), to_dict(AgentConfig()))


FREE_FORM = {"model.tiny", "env.kwargs", "env.fields", "generator.engine_kwargs", "trainer.titan"}
FREE_FORM |= {"rewards.components", "hosts.addresses", "hosts.nodes", "hosts.services"}
FREE_FORM |= {"hosts.slurm"}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_yaml_loads_and_builds_its_components(name):
    from forge_agent.generator.engine_args import engine_args
    from forge_agent.trainer.config import titan_degrees

    cfg = load_config(AGENT_DIR / name)
    assert isinstance(cfg, AgentConfig)
    assert isinstance(cfg.trainer.loss, LossConfig)
    assert engine_args(cfg.generator, "/models/policy", cfg.model.dtype, cfg.seed)["model"]
    if cfg.trainer.backend == "titan":
        tp, dp = titan_degrees(cfg.trainer.titan, cfg.services.trainer.procs)
        assert tp * dp == cfg.services.trainer.procs


def test_titan_degrees_must_multiply_to_the_trainer_procs():
    base = ["trainer.backend=titan", "services.trainer.procs=4"]
    with pytest.raises(ConfigError, match=r"data_parallel_shard_degree=3 x .* != 4 trainer procs"):
        load_config(None, [*base, "trainer.titan={data_parallel_shard_degree: 3}"])
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['tp'\]"):
        load_config(None, [*base, "trainer.titan={tp: 2}"])
    cfg = load_config(None, [*base, "trainer.titan={tensor_parallel_degree: 2}"])
    assert cfg.trainer.titan == {"tensor_parallel_degree": 2}
    with pytest.raises(ConfigError, match=r"trainer.titan=.*trainer.backend is 'hf'"):
        load_config(None, ["trainer.titan={tensor_parallel_degree: 1}"])


def test_gpu_configs_inherit_the_default_and_override_what_differs():
    cfg = load_config(AGENT_DIR / "qwen3_8b_code_exec.yaml")
    assert cfg.model.name == "Qwen/Qwen3-8B"
    assert cfg.model.dtype == "bfloat16"
    assert cfg.env.id == "code_exec"
    assert cfg.services.trainer.with_gpus and cfg.services.trainer.procs == 4
    assert cfg.generator.tensor_parallel_size == 2
    assert cfg.trainer.lr == pytest.approx(1e-6)
    assert not cfg.warm_start.enabled
    assert cfg.trainer.loss == AgentConfig().trainer.loss  # inherited
    # A free-form mapping from the child replaces the parent's: no calculator kwargs leak in.
    assert "difficulty" not in cfg.env.kwargs


# ---------------------------------------------------------------- overrides
def test_overrides_set_nested_typed_values():
    cfg = load_config(
        None,
        [
            "training.group_size=4",
            "trainer.lr=3e-4",  # PyYAML reads 3e-4 as a string; float fields accept it
            "env.kwargs={difficulty: 2}",
            "model.tiny.hidden_size=64",
            "trainer.loss.name=gspo",
            "trainer.betas=[0.9, 0.95]",
            "metrics.wandb_project=my-project",
        ],
    )
    assert cfg.training.group_size == 4
    assert cfg.trainer.lr == pytest.approx(3e-4)
    assert cfg.trainer.betas == (0.9, 0.95)
    assert cfg.env.kwargs == {"difficulty": 2}
    assert cfg.model.tiny == {"hidden_size": 64}
    assert cfg.model.tiny_config().hidden_size == 64
    assert cfg.trainer.loss == LossConfig(name="gspo")  # the preset's values, not dapo's
    assert cfg.metrics.wandb_project == "my-project"


def test_override_of_one_service_key_keeps_that_services_other_defaults():
    cfg = load_config(None, ["services.generator.with_gpus=true"])
    assert cfg.services.generator == GeneratorPlacement(num_replicas=1, with_gpus=True)


def test_overrides_apply_after_the_yaml_file():
    cfg = load_config(AGENT_DIR / "qwen3_1_7b_code_exec.yaml", ["training.group_size=4"])
    assert cfg.training.group_size == 4
    assert cfg.model.name == "Qwen/Qwen3-1.7B"


def test_int_is_accepted_for_a_float_field():
    cfg = load_config(None, ["rollout.temperature=1"])
    assert cfg.rollout.temperature == 1.0 and isinstance(cfg.rollout.temperature, float)


def test_optional_field_accepts_null():
    cfg = load_config(None, ["env.dataset=tasks.jsonl", "env.dataset=null"])
    assert cfg.env.dataset is None


def test_override_without_equals_sign_is_an_error():
    with pytest.raises(ConfigError, match=r"not of the form key=value"):
        load_config(None, ["training.group_size"])


def test_parse_cli_reads_config_path_and_overrides():
    cfg = parse_cli(["--config", str(AGENT_DIR / "default.yaml"), "seed=3", "resume=true"])
    assert cfg.seed == 3 and cfg.checkpoint.resume


# ---------------------------------------------------------------- errors name the key
def test_unknown_key_names_the_key_the_allowed_keys_and_a_suggestion():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["training.group_sze=4"])
    msg = str(err.value)
    assert "'training.group_sze'" in msg
    assert "did you mean 'training.group_size'" in msg
    assert "steps, groups_per_step, group_size" in msg


def test_unknown_key_in_a_yaml_file_is_an_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  stepz: 3\n")
    with pytest.raises(ConfigError, match=r"unknown key 'training.stepz'.*'training.steps'"):
        load_config(path)


def test_unknown_top_level_section_is_an_error():
    with pytest.raises(ConfigError, match=r"unknown key 'ppo'.*allowed keys at the top level"):
        load_config(None, ["ppo.n_samples=4"])


def test_a_renamed_key_names_its_new_key_in_an_override_and_in_a_yaml_file(tmp_path):
    with pytest.raises(ConfigError, match=r"it was renamed .training.group_size."):
        load_config(None, ["grpo.n_samples=4"])
    path = tmp_path / "old.yaml"
    path.write_text("seed: 1\ntraining:\n  lr: 0.001\ngrpo:\n  loss: gspo\n")
    with pytest.raises(ConfigError, match=r"'training.lr': it was renamed 'trainer.lr'"):
        load_config(path)
    # every new name exists in the schema
    for new in AgentConfig.RENAMED.values():
        load_config(None, [f"{new}={_value_of(new)}"])


def _value_of(key: str):
    import dataclasses

    node = AgentConfig()
    for part in key.split("."):
        node = getattr(node, part)
    if dataclasses.is_dataclass(node) or isinstance(node, dict):
        return "{}"
    return "null" if node is None else json.dumps(list(node) if isinstance(node, tuple) else node)


def test_unknown_tiny_model_key_lists_the_tiny_model_fields():
    with pytest.raises(ConfigError, match=r"'model.tiny.hidden_sizes'.*hidden_size"):
        load_config(None, ["model.tiny.hidden_sizes=64"])


def test_bad_literal_lists_the_allowed_values():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["trainer.loss.name=ppo"])
    msg = str(err.value)
    assert "trainer.loss.name='ppo'" in msg
    assert "'grpo', 'dr_grpo', 'dapo', 'gspo', 'cispo'" in msg


def test_bad_type_names_the_key_the_value_and_the_expected_type():
    with pytest.raises(ConfigError, match=r"training.group_size='many' \(str\).*expected an int"):
        load_config(None, ["training.group_size=many"])


def test_bool_is_not_accepted_for_an_int():
    with pytest.raises(ConfigError, match=r"training.steps=True"):
        load_config(None, ["training.steps=true"])


def test_list_fields_are_checked_elementwise():
    with pytest.raises(ConfigError, match=r"model.tiny.extra_corpus\[1\]=3"):
        load_config(None, ["model.tiny.extra_corpus=[a, 3]"])


def test_dict_of_float_values_are_checked():
    with pytest.raises(ConfigError, match=r"rewards.components.tool_use='lots'"):
        load_config(None, ["rewards.components={tool_use: lots}"])


def test_override_into_a_scalar_is_an_error():
    with pytest.raises(ConfigError, match=r"'training.group_size' is an int, not a section"):
        load_config(None, ["training.group_size.x=1"])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("training.group_size=1", "training.group_size"),
        ("trainer.loss.clip_eps_low=-0.1", "trainer.loss.clip_eps_low"),
        ("trainer.lr=0", "trainer.lr"),
        ("generator.max_num_seqs=0", "generator.max_num_seqs"),
        ("training.max_policy_lag=-1", "training.max_policy_lag"),
        ("training.steps=0", "training.steps"),
        ("warm_start.demo_fraction=1.5", "warm_start.demo_fraction"),
        ("services.trainer.procs=0", "services.trainer.procs"),
        ("rollout.max_total_tokens=4096", "rollout.max_total_tokens"),
    ],
)
def test_out_of_range_value_names_the_key(override, key):
    with pytest.raises(ConfigError, match=rf"^{key}="):
        load_config(None, [override])


def test_range_checks_run_for_directly_built_sections():
    with pytest.raises(ConfigError, match=r"group_size=1"):
        TrainingConfig(group_size=1)


def test_from_dict_builds_nested_sections_and_prefixes_keys():
    loss = from_dict(LossConfig, {"name": "gspo", "kl_coef": 0.01})
    assert loss == LossConfig(name="gspo", kl_coef=0.01)
    with pytest.raises(ConfigError, match=r"unknown key 'rl.loss.nope'"):
        from_dict(LossConfig, {"nope": 1}, where="rl.loss")


# ---------------------------------------------------------------- inheritance, alias, round trip
def test_defaults_key_inherits_from_a_sibling_yaml_merged_deeply(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "seed: 5\ntrainer: {loss: {name: grpo, kl_coef: 0.1}}\n"
        "services: {trainer: {with_gpus: true}}\n"
    )
    (tmp_path / "child.yaml").write_text(
        "defaults: base.yaml\ntrainer: {loss: {name: gspo}}\nservices: {trainer: {procs: 3}}\n"
    )
    cfg = load_config(tmp_path / "child.yaml")
    assert cfg.seed == 5
    assert cfg.trainer.loss == LossConfig(name="gspo", kl_coef=0.1)
    assert cfg.services.trainer == TrainerPlacement(procs=3, with_gpus=True)


def test_defaults_cycle_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")


def test_a_user_yaml_anywhere_inherits_a_shipped_config_by_name(tmp_path):
    (tmp_path / "mine.yaml").write_text("defaults: frozen_lake.yaml\ntraining: {steps: 7}\n")
    cfg = parse_cli(["--config", str(tmp_path / "mine.yaml")])
    shipped = load_config(AGENT_DIR / "frozen_lake.yaml")
    assert cfg.env == shipped.env and cfg.training.steps == 7


def test_a_sibling_yaml_wins_over_a_shipped_one_of_the_same_name(tmp_path):
    (tmp_path / "default.yaml").write_text("seed: 11\n")
    (tmp_path / "mine.yaml").write_text("defaults: default.yaml\n")
    assert load_config(tmp_path / "mine.yaml").seed == 11


def test_a_defaults_name_found_nowhere_names_every_place_looked(tmp_path):
    (tmp_path / "mine.yaml").write_text("defaults: nope.yaml\n")
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "mine.yaml")
    assert str(tmp_path / "nope.yaml") in str(err.value)
    assert str(AGENT_DIR / "nope.yaml") in str(err.value)


def test_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_resume_shortcut_sets_checkpoint_resume():
    assert load_config(None, ["resume=true"]).checkpoint.resume
    assert load_config(None, ["checkpoint.resume=true"]).checkpoint.resume
    assert not load_config(None, []).checkpoint.resume


def test_dump_then_load_round_trips(tmp_path):
    cfg = load_config(
        AGENT_DIR / "qwen3_8b_code_exec.yaml",
        ["model.tiny.hidden_size=64", "rewards.components={tool_use: 0.1}", "trainer.lr=3e-4"],
    )
    path = dump_yaml(cfg, tmp_path / "run" / "config.yaml")
    assert load_config(path) == cfg


def test_the_engine_args_carry_the_generator_section_and_the_runs_model():
    from forge_agent.generator.engine_args import engine_args

    cfg = load_config(AGENT_DIR / "qwen3_8b_code_exec.yaml")
    args = engine_args(cfg.generator, "/models/qwen3-8b", cfg.model.dtype, cfg.seed)
    assert args["model"] == "/models/qwen3-8b"
    assert args["tensor_parallel_size"] == 2 and args["max_model_len"] == 8192
    assert args["dtype"] == "bfloat16" and not args["enforce_eager"]


def test_a_sharded_trainer_is_set_by_procs_alone():
    """`services.trainer.procs: 2` shards the hf trainer with FSDP2 (and titan's likewise)."""
    for backend in ("hf", "titan"):
        cfg = load_config(None, ["services.trainer.procs=2", f"trainer.backend={backend}"])
        assert cfg.services.trainer.procs == 2


def test_a_generator_replica_has_no_procs_key():
    """A replica is one proc running vLLM; replicas are added with num_replicas."""
    with pytest.raises(ConfigError, match=r"services\.generator\.procs"):
        load_config(None, ["services.generator.procs=2"])


def test_a_cpu_device_with_gpu_services_is_an_error():
    with pytest.raises(ConfigError, match=r"device=.cpu. .*with_gpus"):
        load_config(None, ["device=cpu", "services.trainer.with_gpus=true"])


def test_a_loss_preset_stands_unless_a_key_is_set():
    assert load_config(None, ["trainer.loss.name=grpo"]).trainer.loss.kl_coef == 0.04
    cfg = load_config(None, ["trainer.loss.name=gspo", "trainer.loss.clip_eps_high=5e-4"])
    assert (cfg.trainer.loss.clip_eps_low, cfg.trainer.loss.clip_eps_high) == (3e-4, 5e-4)


def test_one_class_per_component():
    """The run's sections are the components' own config classes (no mirrors)."""
    from forge_agent.algorithms.advantages import AdvantageConfig
    from forge_agent.generator.config import GeneratorConfig
    from forge_agent.rollout.config import RolloutConfig
    from forge_agent.trainer.config import TrainerConfig

    cfg = AgentConfig()
    assert type(cfg.generator) is GeneratorConfig and type(cfg.rollout) is RolloutConfig
    assert type(cfg.trainer) is TrainerConfig and type(cfg.advantages) is AdvantageConfig

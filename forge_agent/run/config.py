"""The run configuration schema: ``AgentConfig``, composed of each component's own config.

Each component is built from its own config class, and the run's config is those classes
side by side (the torchtitan / TitanRL shape): ``generator`` is the engine's
``GeneratorConfig``, ``rollout`` the rollout engine's ``RolloutConfig``, ``trainer`` the
trainer's ``TrainerConfig`` (with its ``loss``, a ``LossConfig`` whose ``name`` is a preset),
``advantages`` an ``AdvantageConfig``, and so on. What the run shares (the model, its dtype,
the device and the seed) is set once at the top and handed to each component as arguments.

    cfg = load_config("apps/agent/qwen3_8b_code_exec.yaml", ["training.group_size=4"])

The schema-agnostic machinery (YAML with ``defaults:`` inheritance, ``key=value`` overrides,
type checking, ``ConfigError`` with did-you-mean hints) lives in ``forge_agent.typed_config``;
this module's ``load_yaml`` / ``apply_override`` / ``load_config`` / ``parse_cli`` default the
schema to ``AgentConfig``. Free-form mappings (``env.kwargs``, ``model.tiny``,
``trainer.titan``, ...) are replaced as a whole by a YAML value or an override of the mapping,
and updated key by key by an override of one of their keys (``model.tiny.hidden_size=64``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from forge_agent import typed_config
from forge_agent.algorithms.config import AdvantageConfig, LossConfig
from forge_agent.env.config import EnvConfig
from forge_agent.generator.config import GeneratorConfig
from forge_agent.hosts.config import HostsConfig, PlacementConfig
from forge_agent.hosts.meshes import weight_store_problem
from forge_agent.models.config import TinyModelConfig
from forge_agent.observability.config import MetricsConfig
from forge_agent.rollout.config import RendererConfig, RolloutConfig
from forge_agent.run.stop_causes import StopFacts
from forge_agent.trainer.config import TrainerConfig, titan_degrees
from forge_agent.typed_config import (
    ConfigError,
    dump_yaml,
    from_dict,
    to_dict,
)
from forge_agent.typed_config import check_field as _check
from forge_agent.warm_start.config import WarmStartConfig
from forge_agent.weights.config import WeightStoreConfig

__all__ = [
    "AdvantageConfig",
    "AgentConfig",
    "CheckpointConfig",
    "ConfigError",
    "EnvConfig",
    "EvalConfig",
    "GeneratorConfig",
    "HostsConfig",
    "LossConfig",
    "MetricsConfig",
    "ModelConfig",
    "PlacementConfig",
    "RewardsConfig",
    "RolloutConfig",
    "RunnerConfig",
    "ServiceSpecs",
    "TrainerConfig",
    "TrainingConfig",
    "WarmStartConfig",
    "WeightStoreConfig",
    "apply_override",
    "dump_yaml",
    "from_dict",
    "load_config",
    "load_yaml",
    "parse_cli",
    "to_dict",
]

T = TypeVar("T")


# ====================================================================== schema
@dataclass
class ModelConfig:
    """The policy model: ``"tiny"`` (built locally) or a Hugging Face folder / hub name."""

    name: str = "tiny"
    tiny: dict[str, Any] = field(default_factory=dict)  # TinyModelConfig kwargs
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: float32 on CPU, bf16 on GPU

    def __post_init__(self) -> None:
        _check(bool(self.name), "name", self.name, '"tiny" or a model folder / hub name')
        self.tiny_config()  # validates the keys and types of `tiny`

    @property
    def storage_dtype(self) -> str:
        """The dtype a converted model (a GGUF file) is stored in: bfloat16 when the run asks
        for it, else float32 (a CPU trainer keeps fp32 weights, `trainer.autocast` or not)."""
        return "bfloat16" if self.dtype == "bfloat16" else "float32"

    def tiny_config(self) -> Any:
        """The ``forge_agent.models.config.TinyModelConfig`` that ``tiny`` describes."""
        return from_dict(TinyModelConfig, self.tiny, "model.tiny")


@dataclass
class TrainingConfig:
    """The RL loop: steps, group size, batch, weight-sync cadence and staleness."""

    steps: int = 40
    groups_per_step: int = 8
    group_size: int = 8  # episodes per group (G), all from one task and env seed
    sync_interval: int = 1  # trainer steps between weight syncs
    # 0 = on-policy (sync); n > 0 = async: no trained token was sampled more than n policy
    # versions before the policy it trains (checked per token; see forge_agent/algorithms/replay.py)
    max_policy_lag: int = 0
    # true: a group the advantage filters drop is replaced by a new one until the step has
    # groups_per_step kept groups (DAPO's dynamic sampling; the step waits for the stand-ins);
    # false: a step trains on the groups kept of the groups_per_step it started
    dynamic_sampling: bool = False
    replay_capacity: int = 32  # groups
    weight_sync_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for key in ("steps", "groups_per_step", "sync_interval", "replay_capacity"):
            _check(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")
        _check(self.group_size >= 2, "group_size", self.group_size, "an int >= 2 (a baseline)")
        _check(self.max_policy_lag >= 0, "max_policy_lag", self.max_policy_lag, "an int >= 0")
        # Between syncs the generator samples with weights up to sync_interval - 1 versions old,
        # so a sync interval the lag cannot absorb would starve the trainer of fresh groups.
        _check(
            self.sync_interval <= self.max_policy_lag + 1,
            "sync_interval",
            self.sync_interval,
            f"an int <= max_policy_lag + 1 = {self.max_policy_lag + 1} (between syncs the "
            "generator's weights fall sync_interval - 1 versions behind)",
        )
        _check(
            self.groups_per_step <= self.replay_capacity,
            "groups_per_step",
            self.groups_per_step,
            f"an int <= replay_capacity = {self.replay_capacity}",
        )
        _check(
            self.weight_sync_timeout_s > 0,
            "weight_sync_timeout_s",
            self.weight_sync_timeout_s,
            "seconds > 0",
        )


@dataclass
class RewardsConfig:
    """Extra weighted reward components by name; env-outcome rewards always count with weight 1."""

    components: dict[str, float] = field(default_factory=dict)


@dataclass
class EvalConfig:
    """Held-out evaluation: pass@k and mean reward every ``every`` steps."""

    every: int = 10  # steps; 0 = off
    num_tasks: int = 64
    k: int = 4  # samples per task for pass@k
    temperature: float = 1.0

    def __post_init__(self) -> None:
        _check(self.every >= 0, "every", self.every, "an int >= 0 (0 = off)")
        _check(self.num_tasks >= 1, "num_tasks", self.num_tasks, "an int >= 1")
        _check(self.k >= 1, "k", self.k, "an int >= 1")
        _check(self.temperature > 0.0, "temperature", self.temperature, "a float > 0")


@dataclass
class CheckpointConfig:
    """Periodic checkpoints and resuming from the newest one in ``output_dir``."""

    every: int = 20  # steps; 0 = off
    keep: int = 2
    resume: bool = False

    def __post_init__(self) -> None:
        _check(self.every >= 0, "every", self.every, "an int >= 0 (0 = off)")
        _check(self.keep >= 1, "keep", self.keep, "an int >= 1")


@dataclass
class SupervisionConfig:
    """How a run survives its actors.

    `max_restarts` bounds the restarts of each service (generator replica, reward, trainer);
    the deadlines bound single calls: a call past its deadline is a hung actor, which is
    killed and replaced like a dead one (a generator's weight update is bounded by
    `training.weight_sync_timeout_s`).
    """

    max_restarts: int = 3
    generate_deadline_s: float = 120.0
    reward_deadline_s: float = 300.0
    train_step_deadline_s: float = 1800.0
    call_deadline_s: float = 600.0  # any other call (setup, checkpoints, eval bookkeeping)
    restart_timeout_s: float = 600.0  # spawning and setting up a replacement

    def __post_init__(self) -> None:
        _check(self.max_restarts >= 0, "max_restarts", self.max_restarts, "an int >= 0")
        for name in (
            "generate_deadline_s",
            "reward_deadline_s",
            "train_step_deadline_s",
            "call_deadline_s",
            "restart_timeout_s",
        ):
            value = getattr(self, name)
            _check(value > 0, name, value, "seconds > 0")


@dataclass(frozen=True)
class RunnerConfig:
    """What the run's rollout runners are built from (`AgentConfig.runner_config` makes one):
    the rollout section, the held-out episodes' temperature (`eval.temperature`), the renderer
    section, the LoRA adapter episodes name (`trainer.lora.route`; None: the base model), the
    snapshots a seat may read (`weight_store.max_versions`) and the reward components an agent
    program's eval episodes are scored with (`rewards.components`)."""

    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    eval_temperature: float = 1.0
    renderer: RendererConfig = field(default_factory=RendererConfig)
    adapter_route: str | None = None
    snapshot_versions: int = 1
    reward_components: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ServiceSpecs:
    """What the run's services are built from (`AgentConfig.service_specs` makes one): where
    they run (`services`, `hosts`), each actor's own section (`generator`, `trainer`,
    `weight_store`), their supervision, and what the run shares with them (the model's dtype,
    the device, the seed); the reward actors' rubric takes `reward_components` and the
    rollout's token budget (`rollout.max_total_tokens`)."""

    placement: PlacementConfig
    hosts: HostsConfig
    generator: GeneratorConfig
    trainer: TrainerConfig
    weight_store: WeightStoreConfig
    supervision: SupervisionConfig
    weight_sync_timeout_s: float = 120.0
    reward_components: dict[str, float] = field(default_factory=dict)
    max_total_tokens: int = 1024
    dtype: str = "auto"
    device: str = "auto"
    seed: int = 0


@dataclass
class AgentConfig:
    """A whole training run. The defaults are the CPU default (tiny model, calculator env)."""

    # milestone 1's keys, before the one-schema change: an old config fails naming the new key
    RENAMED: ClassVar[dict[str, str]] = {
        "hosts.workers": "hosts.addresses",  # milestone 6: "worker" is an env worker alone
        "grpo.n_samples": "training.group_size",
        "grpo.loss": "trainer.loss.name",
        "grpo.clip_low": "trainer.loss.clip_eps_low",
        "grpo.clip_high": "trainer.loss.clip_eps_high",
        "grpo.beta": "trainer.loss.kl_coef",
        "grpo.tis_cap": "trainer.loss.tis_cap",
        "grpo.mis_cap": "trainer.loss.mis_cap",
        "grpo.icepop_bounds": "trainer.loss.icepop_bounds",
        "grpo.advantage": "advantages.estimator",
        "grpo.filter_zero_variance": "advantages.drop_zero_variance",
        "grpo.truncated": "advantages.truncated",
        "training.lr": "trainer.lr",
        "training.weight_decay": "trainer.weight_decay",
        "training.grad_clip": "trainer.max_grad_norm",
        "training.token_budget": "trainer.microbatch_tokens",
        "training.entropy_coef": "trainer.loss.entropy_coef",
        "training.backend": "trainer.backend",
        "training.titan": "trainer.titan",
        # milestone 3: one renderer section, one context-length cap
        "model.renderer": "renderer.kind",
        "model.enable_thinking": "renderer.enable_thinking",
        "rollout.max_model_len": "generator.max_model_len",
    }

    seed: int = 0
    output_dir: str = "runs/default"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    resume: bool = False  # shortcut for checkpoint.resume
    model: ModelConfig = field(default_factory=ModelConfig)
    renderer: RendererConfig = field(default_factory=RendererConfig)
    services: PlacementConfig = field(default_factory=PlacementConfig)
    hosts: HostsConfig = field(default_factory=HostsConfig)  # which host each service runs on
    generator: GeneratorConfig = field(default_factory=lambda: GeneratorConfig(max_model_len=1024))
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    advantages: AdvantageConfig = field(default_factory=lambda: AdvantageConfig(truncated="mask"))
    trainer: TrainerConfig = field(
        # short rows: on CPU, sdpa pays for a packed row's block-diagonal mask quadratically
        default_factory=lambda: TrainerConfig(lr=None, row_tokens=512, microbatch_tokens=2048)
    )
    training: TrainingConfig = field(default_factory=TrainingConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    weight_store: WeightStoreConfig = field(default_factory=WeightStoreConfig)
    supervision: SupervisionConfig = field(default_factory=SupervisionConfig)

    def __post_init__(self) -> None:
        if self.resume:
            self.checkpoint.resume = True
        _check(
            self.rollout.max_total_tokens <= self.generator.max_model_len,
            "rollout.max_total_tokens",
            self.rollout.max_total_tokens,
            f"<= generator.max_model_len ({self.generator.max_model_len})",
        )
        _check(
            self.rollout.max_new_tokens_per_turn <= self.rollout.max_total_tokens,
            "rollout.max_new_tokens_per_turn",
            self.rollout.max_new_tokens_per_turn,
            f"<= rollout.max_total_tokens ({self.rollout.max_total_tokens})",
        )
        gpus = self.services.generator.with_gpus or self.services.trainer.with_gpus
        _check(
            not (self.device == "cpu" and gpus),
            "device",
            self.device,
            "'auto' or 'cuda' when services.generator/trainer.with_gpus is set",
        )
        _check_colocation(self)
        problem = weight_store_problem(self.hosts, self.weight_store.backend)
        _check(problem is None, "weight_store.backend", self.weight_store.backend, problem or "")
        try:
            if self.trainer.backend == "titan":
                titan_degrees(self.trainer.titan, self.services.trainer.procs)
            elif self.trainer.titan:
                raise ValueError(
                    f"trainer.titan={self.trainer.titan!r} is set but trainer.backend is "
                    f"{self.trainer.backend!r}; set trainer.backend=titan or drop trainer.titan"
                )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    # ------------------------------------------------------------ what each part is handed
    def runner_config(self) -> RunnerConfig:
        """What the rollout runners are built from (`run.runners.build_runners`)."""
        lora = self.trainer.lora
        return RunnerConfig(
            rollout=self.rollout,
            eval_temperature=self.eval.temperature,
            renderer=self.renderer,
            adapter_route=lora.route if lora is not None else None,
            snapshot_versions=self.weight_store.max_versions,
            reward_components=dict(self.rewards.components),
        )

    def service_specs(self) -> ServiceSpecs:
        """What the services are built from (`run.services.Services`)."""
        return ServiceSpecs(
            placement=self.services,
            hosts=self.hosts,
            generator=self.generator,
            trainer=self.trainer,
            weight_store=self.weight_store,
            supervision=self.supervision,
            weight_sync_timeout_s=self.training.weight_sync_timeout_s,
            reward_components=dict(self.rewards.components),
            max_total_tokens=self.rollout.max_total_tokens,
            dtype=self.model.dtype,
            device=self.device,
            seed=self.seed,
        )

    def stop_facts(self) -> StopFacts:
        """What the run's stops name (`run.stop_causes`): env, rollout, warm start, model."""
        return StopFacts(self.env, self.rollout, self.warm_start, self.model.name)


def _check_colocation(cfg: AgentConfig) -> None:
    """`services.colocate` sleep puts one trainer rank and one generator replica on one GPU
    (standin: on CPU); an error naming the key for any other layout."""
    mode, s = cfg.services.colocate, cfg.services
    if mode == "off":
        return
    key, where = "services.colocate", "one GPU" if mode == "sleep" else "CPU"
    gpus = (s.trainer.with_gpus, s.generator.with_gpus)
    _check(
        gpus == ((True, True) if mode == "sleep" else (False, False)),
        key,
        mode,
        f"the trainer and the generator on {where}, but services.trainer.with_gpus is "
        f"{gpus[0]} and services.generator.with_gpus {gpus[1]}"
        + (" (two devices that differ)" if gpus[0] != gpus[1] else "")
        + ("; on CPU: services.colocate=standin" if mode == "sleep" else ""),
    )
    _check(
        not (mode == "sleep" and cfg.device == "cpu"),
        key,
        mode,
        "device auto or cuda (vLLM's sleep mode needs CUDA; on CPU: services.colocate=standin)",
    )
    one = (s.trainer.procs, s.generator.num_replicas, cfg.generator.tensor_parallel_size)
    _check(
        one == (1, 1, 1),
        key,
        mode,
        f"one trainer rank and one generator replica on one device, got services.trainer."
        f"procs={one[0]}, services.generator.num_replicas={one[1]}, "
        f"generator.tensor_parallel_size={one[2]}",
    )
    _check(
        cfg.training.max_policy_lag == 0,
        key,
        mode,
        f"training.max_policy_lag 0 (the generator sleeps while the trainer steps), got "
        f"{cfg.training.max_policy_lag}",
    )
    _check(
        not (mode == "sleep" and cfg.generator.engine_core == "inproc"),
        key,
        mode,
        "vLLM's engine core in a process of its own (generator.engine_core process or auto; "
        "the in-process core has no sleep mode)",
    )


# ============================================================ loading (AgentConfig by default)
SHIPPED_CONFIGS = Path(__file__).resolve().parents[2] / "apps" / "agent"
"""The configs shipped with the project (`apps/agent/*.yaml`): a ``defaults:`` name that is not
beside the YAML naming it is found here, so a user's config in any folder can say
``defaults: default.yaml`` (or ``frozen_lake.yaml``)."""


def load_yaml(path: str | Path, schema: type | None = None, _seen: tuple[Path, ...] = ()) -> dict:
    """Read a YAML config, resolving ``defaults:`` (a file name or list, relative to ``path``,
    else one of `SHIPPED_CONFIGS` by name).

    Each defaults file is loaded first (recursively) and this file's sections are merged over
    it; later defaults files win over earlier ones. ``schema`` defaults to ``AgentConfig``.
    """
    schema = AgentConfig if schema is None else schema
    return typed_config.load_yaml(path, schema, _seen, search=(SHIPPED_CONFIGS,))


def apply_override(
    data: dict[str, Any], override: str, schema: type | None = None
) -> dict[str, Any]:
    """Apply one ``a.b.c=value`` override to ``data`` in place (value parsed as YAML).

    Keys are checked against the schema (default ``AgentConfig``) down to the first free-form
    mapping; inside one (``model.tiny.hidden_size=64``) any key is accepted and set.
    """
    return typed_config.apply_override(data, override, AgentConfig if schema is None else schema)


def load_config(
    path: str | Path | None = None, overrides: Sequence[str] = (), schema: type[T] | None = None
) -> T:
    """Load ``path`` (or the defaults when None), apply ``overrides``, validate and build.

    ``schema`` defaults to ``AgentConfig``.
    """
    schema = AgentConfig if schema is None else schema  # type: ignore[assignment]
    search = (SHIPPED_CONFIGS,)
    return typed_config.load_config(path, overrides, schema, search)  # type: ignore[arg-type]


def parse_cli(argv: Sequence[str], schema: type[T] | None = None) -> T:
    """Build a config from command-line words: ``[--config PATH] key=value ...``.

    ``schema`` defaults to ``AgentConfig``.
    """
    schema = AgentConfig if schema is None else schema  # type: ignore[assignment]
    return typed_config.parse_cli(argv, schema, (SHIPPED_CONFIGS,))  # type: ignore[arg-type]

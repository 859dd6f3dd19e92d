"""The run configuration schema: ``AgentConfig`` and its sections, with their range checks.

The schema is a tree of dataclasses whose defaults are the CPU default run. Sections follow
torchforge's shape (``services.<name>.num_replicas / with_gpus``, ``grpo.n_samples /
clip_low / clip_high / beta / temperature``, ``training.sync_interval / entropy_coef``).

    cfg = load_config("apps/agent/qwen3_8b_code_exec.yaml", ["grpo.n_samples=4", "resume=true"])

The schema-agnostic machinery (YAML with ``defaults:`` inheritance, ``key=value`` overrides,
type checking, ``ConfigError``) lives in ``forge_agent.typed_config``; this module re-exports it,
and its ``load_yaml`` / ``apply_override`` / ``load_config`` / ``parse_cli`` default the schema
to ``AgentConfig``. Free-form mappings (``env.kwargs``, ``model.tiny``, ``training.titan``, ...)
are replaced as a whole by a YAML value or an override of the mapping, and updated key by key by
an override of one of their keys (``model.tiny.hidden_size=64``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from forge_agent import typed_config
from forge_agent.metrics import MetricsConfig
from forge_agent.placement import PlacementConfig
from forge_agent.rollout.engine import RolloutConfig
from forge_agent.typed_config import (
    ConfigError,
    dump_yaml,
    from_dict,
    to_dict,
)
from forge_agent.typed_config import check_field as _check
from forge_agent.warm_start import WarmStartConfig
from forge_agent.weight_store import WeightStoreConfig

__all__ = [
    "AgentConfig",
    "CheckpointConfig",
    "ConfigError",
    "EnvConfig",
    "EvalConfig",
    "GRPOConfig",
    "GeneratorEngineConfig",
    "MetricsConfig",
    "ModelConfig",
    "PlacementConfig",
    "RewardsConfig",
    "RolloutConfig",
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
    renderer: Literal["auto", "qwen3", "default"] = "auto"
    enable_thinking: bool = False

    def __post_init__(self) -> None:
        _check(bool(self.name), "name", self.name, '"tiny" or a model folder / hub name')
        self.tiny_config()  # validates the keys and types of `tiny`

    def tiny_config(self) -> Any:
        """The ``forge_agent.models.tiny.TinyModelConfig`` that ``tiny`` describes."""
        from forge_agent.models.tiny import TinyModelConfig

        return from_dict(TinyModelConfig, self.tiny, "model.tiny")


@dataclass
class GeneratorEngineConfig:
    """vLLM engine settings (see ``forge_agent.generator.GeneratorConfig``)."""

    max_model_len: int = 1024
    enforce_eager: bool = True
    gpu_memory_utilization: float = 0.85
    tensor_parallel_size: int = 1
    cpu_kv_cache_gb: int = 1
    max_num_seqs: int = 128
    enable_prefix_caching: bool = True
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to AsyncEngineArgs

    def __post_init__(self) -> None:
        _check(self.max_model_len >= 16, "max_model_len", self.max_model_len, "an int >= 16")
        _check(
            0.0 < self.gpu_memory_utilization <= 1.0,
            "gpu_memory_utilization",
            self.gpu_memory_utilization,
            "a fraction in (0, 1]",
        )
        for key in ("tensor_parallel_size", "cpu_kv_cache_gb", "max_num_seqs"):
            _check(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")


@dataclass
class EnvConfig:
    """Which environment to train on and how long its calls may take."""

    id: str = "calculator"
    kwargs: dict[str, Any] = field(default_factory=lambda: {"difficulty": 1})
    step_timeout_s: float = 30.0
    reset_timeout_s: float = 60.0
    train_seed: int = 0  # seed of the first training task; eval tasks start at eval_seed
    eval_seed: int = 10_000
    dataset: str | None = None  # hub name or local json/jsonl/parquet/csv of tasks
    fields: dict[str, str] = field(default_factory=dict)  # task field -> column or "{template}"

    def __post_init__(self) -> None:
        _check(bool(self.id), "id", self.id, "a registered env id or 'module:Name'")
        for key in ("step_timeout_s", "reset_timeout_s"):
            _check(getattr(self, key) > 0, key, getattr(self, key), "seconds > 0")


@dataclass
class GRPOConfig:
    """Group sampling, advantage and loss settings of the GRPO family."""

    n_samples: int = 8  # episodes per group (G)
    # The loss preset's values stand unless set here (None = the preset's value).
    clip_low: float | None = None  # ratio clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float | None = None
    beta: float | None = None  # KL coefficient against the reference policy
    loss: Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"] = "dapo"  # see LossConfig.preset
    advantage: Literal["grpo", "dr_grpo", "rloo"] = "grpo"
    filter_zero_variance: bool = True  # drop groups whose rewards are all equal
    truncated: Literal["keep", "mask", "drop"] = "mask"  # what to do with truncated episodes
    # Sampler/trainer mismatch correction, at most one (see forge_agent/losses.py): TIS cap,
    # MIS cap (tokens over it are dropped), or IcePop's two-sided band [alpha, beta].
    tis_cap: float | None = None
    mis_cap: float | None = None
    icepop_bounds: list[float] | None = None

    def __post_init__(self) -> None:
        _check(self.n_samples >= 2, "n_samples", self.n_samples, "an int >= 2 (a group baseline)")
        for key in ("clip_low", "clip_high", "beta"):
            value = getattr(self, key)
            _check(value is None or value >= 0.0, key, value, "a float >= 0 (null: the preset's)")
        _check(
            self.clip_low is None or self.clip_low < 1.0, "clip_low", self.clip_low, "a float < 1"
        )
        chosen = [k for k in ("tis_cap", "mis_cap", "icepop_bounds") if getattr(self, k)]
        _check(len(chosen) <= 1, chosen[-1] if chosen else "tis_cap", chosen, "one correction")
        for key in ("tis_cap", "mis_cap"):
            value = getattr(self, key)
            _check(value is None or value > 0, key, value, "a float > 0 or null")
        b = self.icepop_bounds
        _check(
            b is None or (len(b) == 2 and 0 <= b[0] < b[1]),
            "icepop_bounds",
            b,
            "[alpha, beta] with 0 <= alpha < beta (IcePop uses [0.5, 5.0]) or null",
        )

    def loss_config(self, entropy_coef: float = 0.0) -> Any:
        """The ``LossConfig`` of preset ``loss`` with only the keys set here over it."""
        from forge_agent.losses import LossConfig

        chosen = {"clip_eps_low": self.clip_low, "clip_eps_high": self.clip_high}
        chosen["kl_coef"] = self.beta
        overrides = {k: v for k, v in chosen.items() if v is not None}
        bounds = tuple(self.icepop_bounds) if self.icepop_bounds else None
        return LossConfig.preset(
            self.loss,
            entropy_coef=entropy_coef,
            tis_cap=self.tis_cap,
            mis_cap=self.mis_cap,
            icepop_bounds=bounds,
            **overrides,
        )


@dataclass
class TrainingConfig:
    """Optimizer, batch, weight-sync and staleness settings of the RL phase."""

    steps: int = 40
    groups_per_step: int = 8
    lr: float = 1e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max grad norm; 0 = off
    token_budget: int = 8192  # tokens per micro-batch (gradient accumulation)
    sync_interval: int = 1  # trainer steps between weight syncs
    entropy_coef: float = 0.0
    # 0 = on-policy (sync); n > 0 = async: no trained token was sampled more than n policy
    # versions before the policy it trains (checked per token; see forge_agent/replay.py)
    max_policy_lag: int = 0
    backend: Literal["hf", "titan"] = "hf"
    titan: dict[str, Any] = field(default_factory=dict)  # torchtitan parallelism degrees
    replay_capacity: int = 32  # groups
    weight_sync_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for key in ("steps", "groups_per_step", "token_budget", "sync_interval", "replay_capacity"):
            _check(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")
        _check(self.lr > 0.0, "lr", self.lr, "a float > 0")
        for key in ("weight_decay", "grad_clip"):
            _check(getattr(self, key) >= 0.0, key, getattr(self, key), "a float >= 0")
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
class AgentConfig:
    """A whole training run. The defaults are the CPU default (tiny model, calculator env)."""

    seed: int = 0
    output_dir: str = "runs/default"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    resume: bool = False  # shortcut for checkpoint.resume
    model: ModelConfig = field(default_factory=ModelConfig)
    services: PlacementConfig = field(default_factory=PlacementConfig)
    generator: GeneratorEngineConfig = field(default_factory=GeneratorEngineConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    weight_store: WeightStoreConfig = field(default_factory=WeightStoreConfig)

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
        if self.training.backend == "titan":
            try:
                titan_degrees(self.training.titan, self.services.trainer.procs)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None

    def trainer_config(self, model_path: str | Path) -> Any:
        """The ``forge_agent.trainer.TrainerConfig`` of this run's policy trainer."""
        from forge_agent.trainer.core import TrainerConfig

        t = self.training
        return TrainerConfig(
            model=str(model_path),
            device=self.device,
            dtype=self.model.dtype,
            lr=t.lr,
            weight_decay=t.weight_decay,
            max_grad_norm=t.grad_clip or None,
            loss=self.grpo.loss_config(t.entropy_coef),
            row_tokens=min(512, t.token_budget),  # see warm_start.py on row length
            microbatch_tokens=t.token_budget,
            seed=self.seed,
        )

    def generator_config(self, model_path: str | Path) -> Any:
        """The ``forge_agent.generator.GeneratorConfig`` for this run's engine."""
        from forge_agent.generator.engine import GeneratorConfig

        g = self.generator
        return GeneratorConfig(
            model=str(model_path),
            dtype=self.model.dtype,
            max_model_len=g.max_model_len,
            seed=self.seed,
            enforce_eager=g.enforce_eager,
            tensor_parallel_size=g.tensor_parallel_size,
            gpu_memory_utilization=g.gpu_memory_utilization,
            cpu_kv_cache_gb=g.cpu_kv_cache_gb,
            enable_prefix_caching=g.enable_prefix_caching,
            max_num_seqs=g.max_num_seqs,
            engine_kwargs=dict(g.engine_kwargs),
        )


TITAN_KEYS = ("tensor_parallel_degree", "data_parallel_shard_degree")


def titan_degrees(titan: dict[str, Any], world: int) -> tuple[int, int]:
    """(tensor parallel, FSDP shard) degrees of ``training.titan`` for ``world`` trainer procs.

    ``data_parallel_shard_degree`` -1 means "the rest": ``world // tensor_parallel_degree``.
    """
    unknown = sorted(set(titan) - set(TITAN_KEYS))
    if unknown:
        raise ValueError(f"training.titan: unknown key(s) {unknown}; expected {list(TITAN_KEYS)}")
    tp = int(titan.get("tensor_parallel_degree", 1))
    dp = int(titan.get("data_parallel_shard_degree", -1))
    if tp < 1 or world % tp:
        raise ValueError(
            f"training.titan.tensor_parallel_degree={tp} does not divide the "
            f"{world} trainer procs (services.trainer.procs)"
        )
    if dp == -1:
        dp = world // tp
    if dp * tp != world:
        raise ValueError(
            f"training.titan.data_parallel_shard_degree={dp} x tensor_parallel_degree={tp} != "
            f"{world} trainer procs (services.trainer.procs); use -1 for the rest"
        )
    return tp, dp


# ============================================================ loading (AgentConfig by default)
def load_yaml(path: str | Path, schema: Any = None, _seen: tuple[Path, ...] = ()) -> dict:
    """Read a YAML config, resolving ``defaults:`` (a file name or list, relative to ``path``).

    Each defaults file is loaded first (recursively) and this file's sections are merged over
    it; later defaults files win over earlier ones. ``schema`` defaults to ``AgentConfig``.
    """
    return typed_config.load_yaml(path, AgentConfig if schema is None else schema, _seen)


def apply_override(data: dict[str, Any], override: str, schema: Any = None) -> dict[str, Any]:
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
    return typed_config.load_config(path, overrides, schema)  # type: ignore[arg-type]


def parse_cli(argv: Sequence[str], schema: type[T] | None = None) -> T:
    """Build a config from command-line words: ``[--config PATH] key=value ...``.

    ``schema`` defaults to ``AgentConfig``.
    """
    schema = AgentConfig if schema is None else schema  # type: ignore[assignment]
    return typed_config.parse_cli(argv, schema)  # type: ignore[arg-type]

"""The algorithms' configs, as plain data: the advantage estimator and its filters
(`AdvantageConfig`, used by `advantages.py`) and the policy loss, with its named presets
(`LossConfig`, used by `losses.py`). Kept apart from the torch primitives so that a run's config
loads without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from forge_agent.typed_config import check_field

Metrics = dict[str, float]

RatioLevel = Literal["token", "sequence"]
PolicyLossKind = Literal["ppo_clip", "cispo", "reinforce"]
KLEstimator = Literal["k1", "k2", "k3"]
Aggregation = Literal["token_mean", "sequence_mean", "fixed_horizon"]


PresetName = Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"]

# The recipes: each names only the fields where it departs from the base values below.
_BASE: dict[str, object] = {
    "ratio_level": "token",
    "policy_loss": "ppo_clip",
    "clip_eps_low": 0.2,
    "clip_eps_high": 0.2,
    "kl_coef": 0.0,
    "kl_estimator": "k3",
    "aggregation": "token_mean",
}
PRESETS: dict[str, dict[str, object]] = {
    # Shao et al. 2024: token ratio, PPO clip 0.2, k3 KL beta=0.04, sequence mean
    "grpo": {"kl_coef": 0.04, "aggregation": "sequence_mean"},
    # Liu et al. 2025: no KL, fixed-horizon sum (horizon: the generation budget)
    "dr_grpo": {"aggregation": "fixed_horizon", "horizon": 1024},
    # Yu et al. 2025: clip-higher 0.2/0.28, no KL, token mean
    "dapo": {"clip_eps_high": 0.28},
    # Zheng et al. 2025: sequence ratio, clip 3e-4/4e-4, sequence mean
    "gspo": {
        "ratio_level": "sequence",
        "clip_eps_low": 3e-4,
        "clip_eps_high": 4e-4,
        "aggregation": "sequence_mean",
    },
    # MiniMax 2025: clipped IS-weight REINFORCE, eps_high 4.0, token mean
    "cispo": {"policy_loss": "cispo", "clip_eps_low": 1.0, "clip_eps_high": 4.0},
}


@dataclass
class LossConfig:
    """How to build the policy loss from the primitives above.

    `name`: the preset (recipe) the other fields start from (`PRESETS`: grpo, dr_grpo, dapo,
    gspo, cispo; default dapo). A field left None takes the preset's value; a field set
    explicitly stands. After construction every field holds the value the loss uses.
    `ratio_level`: token-level PPO ratio or GSPO sequence-level ratio.
    `policy_loss`: "ppo_clip" (with `clip_eps_low/high`, optional `dual_clip_c`), "cispo"
    (clipped IS weight with `clip_eps_low/high`), or "reinforce" (unclipped).
    `kl_coef`/`kl_estimator`: penalty toward a frozen reference policy (0 disables it).
    `tis_cap`: when set, Yao et al. 2025 truncated importance sampling: the ratio is taken
    against the trainer's own old logprobs and each token is weighted by
    min(pi_trainer_old / pi_sampler, tis_cap). When None the ratio is taken against the
    sampler's logprobs directly.
    `mis_cap`: the same with MIS (`masked_importance_sampling`): tokens whose ratio exceeds
    the cap are dropped, not truncated. `icepop_bounds`: the same with IcePop's two-sided
    mask (`icepop_weights`, (alpha, beta), e.g. (0.5, 5.0)). At most one of the three is set.
    `entropy_coef`: entropy bonus weight. `aggregation`/`horizon`: see `aggregate`.
    """

    name: PresetName = "dapo"
    ratio_level: RatioLevel | None = None
    policy_loss: PolicyLossKind | None = None
    clip_eps_low: float | None = None
    clip_eps_high: float | None = None
    dual_clip_c: float | None = None
    kl_coef: float | None = None
    kl_estimator: KLEstimator | None = None
    tis_cap: float | None = None
    mis_cap: float | None = None
    icepop_bounds: tuple[float, float] | None = None
    entropy_coef: float = 0.0
    aggregation: Aggregation | None = None
    horizon: int | None = None

    def __post_init__(self) -> None:
        check_field(self.name in PRESETS, "name", self.name, f"one of {sorted(PRESETS)}")
        for key, value in {**_BASE, **PRESETS[self.name]}.items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        for key in ("clip_eps_low", "clip_eps_high", "kl_coef", "entropy_coef"):
            value = getattr(self, key)
            check_field(value >= 0.0, key, value, "a float >= 0")
        for key in ("tis_cap", "mis_cap"):
            value = getattr(self, key)
            check_field(value is None or value > 0, key, value, "a float > 0 or null")
        b = self.icepop_bounds
        if b is not None:
            b = self.icepop_bounds = tuple(b)  # type: ignore[assignment]
        check_field(
            b is None or (len(b) == 2 and 0 <= b[0] < b[1]),
            "icepop_bounds",
            b,
            "(alpha, beta) with 0 <= alpha < beta (IcePop uses (0.5, 5.0)) or null",
        )
        chosen = [k for k in ("tis_cap", "mis_cap", "icepop_bounds") if getattr(self, k)]
        check_field(
            len(chosen) <= 1,
            chosen[-1] if chosen else "tis_cap",
            chosen,
            "one sampler-mismatch correction (tis_cap, mis_cap and icepop_bounds each "
            "reweight the same tokens)",
        )

    @property
    def correction(self) -> str:
        """The sampler-mismatch correction in use: "tis", "mis", "icepop" or "none"."""
        if self.tis_cap is not None:
            return "tis"
        if self.mis_cap is not None:
            return "mis"
        return "icepop" if self.icepop_bounds is not None else "none"

    def as_metrics(self) -> Metrics:
        """The numeric settings a loss used, as metrics (``loss_config/clip_eps_low`` ...)."""
        keys = ("clip_eps_low", "clip_eps_high", "kl_coef", "entropy_coef")
        metrics = {f"loss_config/{k}": float(getattr(self, k)) for k in keys}
        metrics["loss_config/sequence_ratio"] = float(self.ratio_level == "sequence")
        return metrics

    @classmethod
    def preset(cls, name: str, **overrides: object) -> LossConfig:
        """The preset `name` (see `PRESETS`) with `overrides` standing over its values."""
        return cls(name=name, **overrides)  # type: ignore[arg-type]


Estimator = Literal["grpo", "dr_grpo", "rloo"]
TruncatedPolicy = Literal["keep", "mask", "drop"]
TurnCredit = Literal["none", "discounted", "gigpo"]


@dataclass
class AdvantageConfig:
    """Which estimator and which filters to apply (see the module docstring)."""

    estimator: Estimator = "grpo"
    eps: float = 1e-6
    drop_zero_variance: bool = True
    truncated: TruncatedPolicy = "keep"
    exclude_reward_errors: bool = True
    min_group_size: int = 2
    turn_credit: TurnCredit = "none"
    gamma: float = 1.0  # per-turn discount of `discounted` and of gigpo's step returns
    omega: float = 1.0  # gigpo: weight of the step-level advantage

    def __post_init__(self) -> None:
        check_field(self.eps >= 0.0, "eps", self.eps, "a float >= 0")
        check_field(self.min_group_size >= 1, "min_group_size", self.min_group_size, "an int >= 1")
        check_field(0.0 < self.gamma <= 1.0, "gamma", self.gamma, "a discount in (0, 1]")
        check_field(self.omega >= 0.0, "omega", self.omega, "a float >= 0")

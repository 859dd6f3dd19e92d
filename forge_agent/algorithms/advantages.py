"""Group-relative advantages and group filters.

Estimators (r_i = reward of trajectory i among the G valid members of its group):
- grpo:    A_i = (r_i - mean(r)) / (std(r) + eps)    (Shao et al. 2024, "DeepSeekMath")
           std is the sample (Bessel-corrected) std, as in TRL and verl.
- dr_grpo: A_i = r_i - mean(r)                        (Liu et al. 2025, "Understanding
           R1-Zero-Like Training: A Critical Perspective")
- rloo:    A_i = r_i - (1/(G-1)) sum_{j != i} r_j      (Kool et al. 2019, "Buy 4 REINFORCE
           Samples, Get a Baseline for Free!"; Ahmadian et al. 2024, "Back to Basics")

Filters, applied per group in this order:
1. infra failures (`Status.is_infra_failure`, or a reward function that raised, see
   `forge_agent.rewards`) are excluded from the baseline and from the loss: they say nothing
   about the policy, so they are neither scored as zero nor trained on;
2. truncated trajectories (`Status.is_truncated`): "keep" (train normally), "mask" (they
   count in the group's baseline but get no loss; DAPO's overlong filtering, Yu et al. 2025)
   or "drop" (removed from the baseline and the loss);
3. groups with fewer than `min_group_size` baseline members are dropped (RLOO needs 2);
4. groups whose baseline rewards all equal (zero variance) are dropped when
   `drop_zero_variance` (all advantages would be 0: no signal, only noise from the KL).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from forge_agent.types import Group, Trajectory

Estimator = Literal["grpo", "dr_grpo", "rloo"]
TruncatedPolicy = Literal["keep", "mask", "drop"]


@dataclass
class AdvantageConfig:
    """Which estimator and which filters to apply (see the module docstring)."""

    estimator: Estimator = "grpo"
    eps: float = 1e-6
    drop_zero_variance: bool = True
    truncated: TruncatedPolicy = "keep"
    exclude_reward_errors: bool = True
    min_group_size: int = 2

    def __post_init__(self) -> None:
        from forge_agent.typed_config import check_field

        check_field(self.eps >= 0.0, "eps", self.eps, "a float >= 0")
        check_field(self.min_group_size >= 1, "min_group_size", self.min_group_size, "an int >= 1")


@dataclass
class AdvantageStats:
    """Counts of what the filters kept and dropped, by reason."""

    groups_in: int = 0
    groups_kept: int = 0
    trajectories_in: int = 0
    trajectories_kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> trajectories

    def as_metrics(self, prefix: str = "advantages/") -> dict[str, float]:
        out = {
            f"{prefix}groups_in": float(self.groups_in),
            f"{prefix}groups_kept": float(self.groups_kept),
            f"{prefix}trajectories_in": float(self.trajectories_in),
            f"{prefix}trajectories_kept": float(self.trajectories_kept),
        }
        out.update({f"{prefix}dropped/{k}": float(v) for k, v in sorted(self.dropped.items())})
        return out


def group_advantages(
    rewards: Sequence[float], estimator: Estimator = "grpo", eps: float = 1e-6
) -> list[float]:
    """Advantages of one group's baseline members (formulas in the module docstring)."""
    g = len(rewards)
    if g == 0:
        return []
    mean = sum(rewards) / g
    if estimator == "dr_grpo":
        return [r - mean for r in rewards]
    if estimator == "grpo":
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (g - 1)) if g > 1 else 0.0
        return [(r - mean) / (std + eps) for r in rewards]
    if estimator == "rloo":
        if g < 2:
            raise ValueError(f"rloo needs at least 2 trajectories per group, got {g}")
        total = sum(rewards)
        return [r - (total - r) / (g - 1) for r in rewards]
    raise ValueError(f"unknown advantage estimator {estimator!r}; expected grpo, dr_grpo, rloo")


def _is_infra(traj: Trajectory, cfg: AdvantageConfig) -> bool:
    return traj.status.is_infra_failure or (
        cfg.exclude_reward_errors and bool(traj.info.get("reward_errors"))
    )


def compute_advantages(
    groups: Sequence[Group], cfg: AdvantageConfig | None = None
) -> tuple[list[Trajectory], AdvantageStats]:
    """Set `traj.advantage` for every trainable trajectory and return them with filter stats.

    Trajectories are updated in place; the returned list holds only those the loss should see
    (in group order). Dropped reasons: "infra_failure", "truncated", "small_group",
    "zero_variance".
    """
    cfg = cfg or AdvantageConfig()
    stats = AdvantageStats(groups_in=len(groups))
    kept: list[Trajectory] = []
    for group in groups:
        trajs = group.trajectories
        stats.trajectories_in += len(trajs)
        baseline: list[Trajectory] = []
        for t in trajs:
            if _is_infra(t, cfg):
                stats.dropped["infra_failure"] += 1
            elif t.status.is_truncated and cfg.truncated == "drop":
                stats.dropped["truncated"] += 1
            else:
                baseline.append(t)
        if len(baseline) < cfg.min_group_size:
            stats.dropped["small_group"] += len(baseline)
            continue
        rewards = [t.reward for t in baseline]
        if cfg.drop_zero_variance and max(rewards) - min(rewards) == 0.0:
            stats.dropped["zero_variance"] += len(baseline)
            continue
        for t, a in zip(baseline, group_advantages(rewards, cfg.estimator, cfg.eps), strict=True):
            t.advantage = a
            if t.status.is_truncated and cfg.truncated == "mask":
                t.advantage = 0.0
                stats.dropped["truncated"] += 1
                continue
            kept.append(t)
        stats.groups_kept += 1
    stats.trajectories_kept = len(kept)
    return kept, stats

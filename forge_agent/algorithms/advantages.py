"""Group-relative advantages and group filters.

Estimators (r_i = reward of trajectory i among the G valid members of its group):
- grpo:    A_i = (r_i - mean(r)) / (std(r) + eps)    (Shao et al. 2024, "DeepSeekMath")
           std is the sample (Bessel-corrected) std, as in TRL and verl.
- dr_grpo: A_i = r_i - mean(r)                        (Liu et al. 2025, "Understanding
           R1-Zero-Like Training: A Critical Perspective")
- rloo:    A_i = r_i - (1/(G-1)) sum_{j != i} r_j      (Kool et al. 2019, "Buy 4 REINFORCE
           Samples, Get a Baseline for Free!"; Ahmadian et al. 2024, "Back to Basics")

Turn-level credit (`turn_credit`; an episode of K turns, r_{i,k} = the reward turn k of member
i earned, `turn_returns`): tokens of turn k get A_{i,k}.
- none:       A_{i,k} = A_i, the estimator's advantage of the episode reward (one per episode).
- discounted: G_{i,k} = sum_{j >= k} gamma^(j-k) r_{i,j}, the discounted return from turn k on;
              A_{i,k} = (G_{i,k} - b_i) / s, with the estimator's baseline b_i and scale s over
              the members' returns from the start G_{i,0} (grpo: mean and std + eps; dr_grpo:
              mean and 1; rloo: the leave-one-out mean and 1). With gamma = 1 and a reward only
              at the end, every G_{i,k} is the episode reward and this is `none`. A turn is
              credited with what came after it, not with rewards earned before it (Sutton and
              Barto's reward-to-go; per-turn discounting as in AReaL's `turn_discount`).
- gigpo:      A_{i,k} = A_i + omega * A^S_{i,k} (Feng et al. 2025, "Group-in-Group Policy
              Optimization for LLM Agent Training"): turns of the group's members that start
              from the same env state (equal `Trajectory.turn_states`, the env's `state_key`)
              form a step-level group; A^S_{i,k} is the estimator applied to the discounted
              returns G_{i,k} within that step group (0 for a turn whose state no other turn
              shares, and for a state without a key).
Multi-seat episodes (`forge_agent.env.SeatEnv`): a group holds G episodes of one task and a
trajectory per policy seat of each; each seat's trajectories (`info["seat"]`) form their own
baseline group, so a first mover's advantage never leaks into the other seat's baseline.
The filters below act on episode rewards in every mode; a dropped or masked member gets no turn
advantages either.

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

from forge_agent.algorithms.config import AdvantageConfig, Estimator
from forge_agent.types import Group, Trajectory


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
    if not rewards:
        return []
    return [
        (r - b) / s for r, (b, s) in zip(rewards, _baselines(rewards, estimator, eps), strict=True)
    ]


def _baselines(
    values: Sequence[float], estimator: Estimator, eps: float
) -> list[tuple[float, float]]:
    """(baseline b_i, scale s) of each member under `estimator` (see `group_advantages`):
    A_i = (x_i - b_i) / s."""
    g = len(values)
    mean = sum(values) / g
    if estimator == "grpo":
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (g - 1)) if g > 1 else 0.0
        return [(mean, std + eps)] * g
    if estimator == "dr_grpo":
        return [(mean, 1.0)] * g
    if estimator == "rloo":
        if g < 2:
            raise ValueError(f"rloo needs at least 2 trajectories per group, got {g}")
        total = sum(values)
        return [((total - v) / (g - 1), 1.0) for v in values]
    raise ValueError(f"unknown advantage estimator {estimator!r}; expected grpo, dr_grpo, rloo")


def turn_returns(traj: Trajectory, gamma: float = 1.0) -> list[float]:
    """G_k = sum_{j >= k} gamma^(j-k) r_j for each turn k of `traj`.

    r_j is `traj.turn_rewards[j]` (what the env returned at the step answering turn j); what the
    episode's reward holds beyond the env's per-turn rewards (the reward actors' components,
    and an env's end-of-episode rewards for a turn that was never stepped) counts at the last
    turn, so sum_j r_j is always `traj.reward`. No turns: [].
    """
    turns = len(traj.turn_spans)
    if turns == 0:
        return []
    rewards = (list(traj.turn_rewards) + [0.0] * turns)[:turns]
    rewards[-1] += traj.reward - sum(rewards)
    out = [0.0] * turns
    running = 0.0
    for k in range(turns - 1, -1, -1):
        running = rewards[k] + gamma * running
        out[k] = running
    return out


def _turn_advantages(
    members: Sequence[Trajectory], episode: Sequence[float], cfg: AdvantageConfig
) -> list[list[float]]:
    """Per-turn advantages of a group's baseline members (formulas in the module docstring)."""
    returns = [turn_returns(t, cfg.gamma) for t in members]
    if cfg.turn_credit == "discounted":
        starts = [g[0] if g else t.reward for g, t in zip(returns, members, strict=True)]
        scales = _baselines(starts, cfg.estimator, cfg.eps)
        return [[(x - b) / s for x in g] for g, (b, s) in zip(returns, scales, strict=True)]
    # gigpo: step-level groups by anchor state
    anchors: dict[str, list[tuple[int, int]]] = {}
    for i, t in enumerate(members):
        for k in range(len(returns[i])):
            key = t.turn_states[k] if k < len(t.turn_states) else None
            if key is not None:
                anchors.setdefault(key, []).append((i, k))
    step = [[0.0] * len(g) for g in returns]
    for where in anchors.values():
        if len(where) < 2:
            continue
        values = [returns[i][k] for i, k in where]
        for (i, k), (b, s) in zip(where, _baselines(values, cfg.estimator, cfg.eps), strict=True):
            step[i][k] = (returns[i][k] - b) / s
    return [[a + cfg.omega * x for x in row] for a, row in zip(episode, step, strict=True)]


def seat_groups(group: Group) -> list[Group]:
    """`group` split by seat (`traj.info["seat"]`), in first-seen order; a one-seat group
    (no seat) is itself."""
    by_seat: dict[object, list[Trajectory]] = {}
    for t in group.trajectories:
        by_seat.setdefault(t.info.get("seat"), []).append(t)
    if len(by_seat) <= 1:
        return [group]
    return [Group(task_id=group.task_id, trajectories=ts) for ts in by_seat.values()]


def _is_infra(traj: Trajectory, cfg: AdvantageConfig) -> bool:
    return traj.status.is_infra_failure or (
        cfg.exclude_reward_errors and bool(traj.info.get("reward_errors"))
    )


def compute_advantages(
    groups: Sequence[Group], cfg: AdvantageConfig | None = None
) -> tuple[list[Trajectory], AdvantageStats]:
    """Set `traj.advantage` (and with turn-level credit `traj.turn_advantages`) for every
    trainable trajectory and return them with filter stats.

    Trajectories are updated in place; the returned list holds only those the loss should see
    (in group order). Dropped reasons: "infra_failure", "truncated", "small_group",
    "zero_variance". A multi-seat group is split by seat first (`seat_groups`).
    """
    cfg = cfg or AdvantageConfig()
    groups = [sub for group in groups for sub in seat_groups(group)]
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
        episode = group_advantages(rewards, cfg.estimator, cfg.eps)
        per_turn = (
            _turn_advantages(baseline, episode, cfg)
            if cfg.turn_credit != "none"
            else [[] for _ in baseline]
        )
        for t, a, turns in zip(baseline, episode, per_turn, strict=True):
            t.advantage = turns[0] if cfg.turn_credit == "discounted" and turns else a
            t.turn_advantages = list(turns)
            if t.status.is_truncated and cfg.truncated == "mask":
                t.advantage, t.turn_advantages = 0.0, []
                stats.dropped["truncated"] += 1
                continue
            kept.append(t)
        stats.groups_kept += 1
    stats.trajectories_kept = len(kept)
    return kept, stats

"""A weighted rubric of reward functions: total = sum_c w_c * r_c, with a per-component breakdown.

Failure policy (a reward function that raises or returns NaN/inf): the component is *excluded*
from that trajectory's total (it contributes nothing; the other weights are not
renormalised), the error is recorded as `traj.info["reward_errors"][name] = "Type: message"`,
and `Rubric.failures[name]` counts it. Nothing becomes NaN and scoring never raises.
Because a total missing a component is not comparable with its group mates, the advantage
step treats a trajectory with `reward_errors` as an infra failure by default (excluded from
its group's baseline and from the loss; see `AdvantageConfig.exclude_reward_errors`).
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from forge_agent.rewards.functions import RewardFn
from forge_agent.types import Trajectory


@dataclass
class RewardComponent:
    """One named, weighted reward function (sync or async).

    `timeout_s` bounds one call (a timeout counts as a failure); `in_thread` runs a slow sync
    function in a worker thread so it does not block the event loop.
    """

    name: str
    fn: RewardFn
    weight: float = 1.0
    timeout_s: float | None = None
    in_thread: bool = False


@dataclass
class RewardResult:
    """A trajectory's score: the weighted total, raw component values and component errors."""

    total: float
    components: dict[str, float] = field(default_factory=dict)  # raw (unweighted) values
    errors: dict[str, str] = field(default_factory=dict)  # component -> "Type: message"


class Rubric:
    """Weighted sum of reward components; `score` never raises for a failing component."""

    def __init__(self, components: Sequence[RewardComponent]) -> None:
        names = [c.name for c in components]
        if not components:
            raise ValueError("a Rubric needs at least one RewardComponent, got none")
        dupes = sorted(n for n, k in Counter(names).items() if k > 1)
        if dupes:
            raise ValueError(f"duplicate reward component names {dupes}")
        for c in components:
            if not math.isfinite(c.weight):
                raise ValueError(f"reward component {c.name!r} has non-finite weight {c.weight}")
        self.components = list(components)
        self.failures: Counter[str] = Counter()

    async def _one(self, comp: RewardComponent, traj: Trajectory) -> float | BaseException:
        try:
            if comp.in_thread:
                call = asyncio.to_thread(comp.fn, traj)
            else:
                call = _as_coroutine(comp.fn, traj)
            value = await asyncio.wait_for(call, comp.timeout_s)
            value = float(value)  # type: ignore[arg-type]
            if not math.isfinite(value):
                raise ValueError(f"reward {comp.name!r} returned non-finite value {value}")
            return value
        except Exception as e:
            return e

    async def score(self, traj: Trajectory) -> RewardResult:
        """Score one trajectory; async components run concurrently."""
        values = await asyncio.gather(*(self._one(c, traj) for c in self.components))
        result = RewardResult(total=0.0)
        for comp, value in zip(self.components, values, strict=True):
            if isinstance(value, BaseException):
                result.errors[comp.name] = f"{type(value).__name__}: {value}"
                self.failures[comp.name] += 1
                continue
            result.components[comp.name] = value
            result.total += comp.weight * value
        return result

    async def score_all(
        self, trajectories: Sequence[Trajectory], apply: bool = True
    ) -> list[RewardResult]:
        """Score many trajectories concurrently; with `apply`, write each result into its
        trajectory (`reward`, `info["reward_breakdown"]`, `info["reward_errors"]`)."""
        results = await asyncio.gather(*(self.score(t) for t in trajectories))
        if apply:
            for traj, res in zip(trajectories, results, strict=True):
                apply_result(traj, res)
        return list(results)


async def _as_coroutine(fn: RewardFn, traj: Trajectory) -> object:
    value = fn(traj)
    if inspect.isawaitable(value):
        value = await value
    return value


def apply_result(traj: Trajectory, result: RewardResult) -> None:
    """Write a `RewardResult` into a trajectory (the env's `reward_components` stay as they are)."""
    traj.reward = result.total
    traj.info["reward_breakdown"] = dict(result.components)
    if result.errors:
        traj.info["reward_errors"] = dict(result.errors)
    else:
        traj.info.pop("reward_errors", None)


def reward_metrics(results: Sequence[RewardResult], prefix: str = "reward/") -> dict[str, float]:
    """Per-component means (over trajectories where it succeeded), total mean, error counts."""
    out: dict[str, float] = {}
    if not results:
        return out
    out[f"{prefix}total"] = sum(r.total for r in results) / len(results)
    names = sorted({n for r in results for n in (*r.components, *r.errors)})
    for name in names:
        vals = [r.components[name] for r in results if name in r.components]
        if vals:
            out[f"{prefix}{name}"] = sum(vals) / len(vals)
        errs = sum(name in r.errors for r in results)
        if errs:
            out[f"{prefix}errors/{name}"] = float(errs)
    return out

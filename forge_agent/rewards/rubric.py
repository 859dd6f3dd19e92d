"""A weighted rubric of reward functions: total = sum_c w_c * r_c, with a per-component breakdown.

A component may return named values (a dict, e.g. an agent program's reward): its r_c is their
sum and the breakdown lists each as `"<component>/<name>"`.

Failure policy (a reward function that raises or returns NaN/inf): the component is *excluded*
from that trajectory's total (it contributes nothing; the other weights are not
renormalised), the error is recorded as `traj.info["reward_errors"][name] = "Type: message"`,
and `Rubric.failures[name]` counts it. Nothing becomes NaN and scoring never raises.
Because a total missing a component is not comparable with its group mates, the advantage
step treats a trajectory with `reward_errors` as an infra failure by default (excluded from
its group's baseline and from the loss; see `AdvantageConfig.exclude_reward_errors`).

Except a component that judges the policy's answer (`RewardComponent.judges_policy`: an agent
program's own reward, a user's `rewards.components` function): like an env's judge, its
raising on the answer is the policy's failure (`policy_error`, or `policy_timeout` past its
`timeout_s`), scored with the env's failure reward and trained on, never dropped as infra
(docs/rewards.md, the rule of blame). A judge that raises `forge_agent.errors.InfraError`
(its model endpoint is down) says the policy did not cause it: a reward error, as above.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from forge_agent.errors import InfraError
from forge_agent.rewards.functions import RewardFn, RewardValue
from forge_agent.types import Status, Trajectory


@dataclass
class RewardComponent:
    """One named, weighted reward function (sync or async).

    `timeout_s` bounds one call (a timeout counts as a failure); `in_thread` runs a slow sync
    function in a worker thread so it does not block the event loop. `judges_policy`: the
    function judges the policy's answer, so its failure is the policy's (see the module
    docstring), scored `failure_reward`.
    """

    name: str
    fn: RewardFn
    weight: float = 1.0
    timeout_s: float | None = None
    in_thread: bool = False
    judges_policy: bool = False
    failure_reward: float = 0.0


@dataclass
class RewardResult:
    """A trajectory's score: the weighted total, raw component values and component errors."""

    total: float
    components: dict[str, float] = field(default_factory=dict)  # raw (unweighted) values
    errors: dict[str, str] = field(default_factory=dict)  # component -> "Type: message"
    policy_failure: tuple[Status, str] | None = None  # a `judges_policy` component failed


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

    async def _one(
        self, comp: RewardComponent, traj: Trajectory
    ) -> dict[str, float] | BaseException:
        """The component's values by breakdown name (its own name, or `name/key` for each
        entry of a dict it returned), or the exception it failed with."""
        try:
            if comp.in_thread:
                call = asyncio.to_thread(comp.fn, traj)
            else:
                call = _as_coroutine(comp.fn, traj)
            value: RewardValue = await asyncio.wait_for(call, comp.timeout_s)  # type: ignore[arg-type]
            if isinstance(value, Mapping):
                values = {f"{comp.name}/{k}": float(v) for k, v in value.items()}
            else:
                values = {comp.name: float(value)}
            for name, v in values.items():
                if not math.isfinite(v):
                    raise ValueError(f"reward {name!r} returned non-finite value {v}")
            return values
        except Exception as e:
            return e

    def select(self, only: Collection[str] | None) -> list[RewardComponent]:
        """The components named in `only` (all when None); an unknown name is an error."""
        if only is None:
            return self.components
        unknown = sorted(set(only) - {c.name for c in self.components})
        if unknown:
            raise ValueError(
                f"unknown reward components {unknown}; the rubric has "
                f"{[c.name for c in self.components]}"
            )
        return [c for c in self.components if c.name in only]

    async def score(self, traj: Trajectory, only: Collection[str] | None = None) -> RewardResult:
        """Score one trajectory (with the components named in `only`, default all); async
        components run concurrently. An episode the policy failed (`Status.is_policy_failure`)
        scores its failure reward alone: no component (a format or tool bonus) can pay it."""
        components = self.select(only)
        if traj.status.is_policy_failure:  # its reward is the env's failure reward, nothing else
            failure = float(traj.info.get("failure_reward", 0.0))
            return RewardResult(total=failure, components={"policy_failure": failure})
        values = await asyncio.gather(*(self._one(c, traj) for c in components))
        result = RewardResult(total=0.0)
        for comp, value in zip(components, values, strict=True):
            if isinstance(value, BaseException):
                result.errors[comp.name] = f"{type(value).__name__}: {value}"
                self.failures[comp.name] += 1
                if comp.judges_policy and not isinstance(value, InfraError):
                    return _policy_failure(comp, value, traj)
                continue
            result.components.update(value)
            result.total += comp.weight * sum(value.values())
        return result

    async def score_all(
        self,
        trajectories: Sequence[Trajectory],
        apply: bool = True,
        only: Collection[str] | None = None,
    ) -> list[RewardResult]:
        """Score many trajectories concurrently (with the components named in `only`, default
        all); with `apply`, write each result into its trajectory (`reward`,
        `info["reward_breakdown"]`, `info["reward_errors"]`)."""
        self.select(only)  # an unknown name fails before any scoring
        results = await asyncio.gather(*(self.score(t, only) for t in trajectories))
        if apply:
            for traj, res in zip(trajectories, results, strict=True):
                apply_result(traj, res)
        return list(results)


def _policy_failure(comp: RewardComponent, exc: BaseException, traj: Trajectory) -> RewardResult:
    """The score of an episode whose answer made `comp` (a judge of it) fail: the env's
    failure reward (recorded on the episode), else the component's."""
    failure = float(traj.info.get("failure_reward", comp.failure_reward))
    timed_out = isinstance(exc, TimeoutError)
    status = Status.POLICY_TIMEOUT if timed_out else Status.POLICY_ERROR
    what = f"ran past {comp.timeout_s:g} s" if timed_out else f"raised {type(exc).__name__}: {exc}"
    return RewardResult(
        total=failure,
        components={"policy_failure": failure},
        policy_failure=(status, f"reward {comp.name!r} {what}"[:500]),
    )


async def _as_coroutine(fn: RewardFn, traj: Trajectory) -> object:
    value = fn(traj)
    if inspect.isawaitable(value):
        value = await value
    return value


def apply_result(traj: Trajectory, result: RewardResult) -> None:
    """Write a `RewardResult` into a trajectory (the env's `reward_components` stay as they
    are, unless a judge of the answer failed: then it is the policy's failure)."""
    if result.policy_failure is not None:
        traj.fail_by_policy(*result.policy_failure, failure_reward=result.total)
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

"""Held-out evaluation: k episodes per task, pass@k, mean reward and episode statistics.

    report = await evaluate(runner, load_tasks("calculator", "eval", 64, seed=10_000), k=4)
    print(report.table())
    metrics.update(report.as_metrics())          # {"eval/reward/mean": ..., "eval/pass@4": ...}

The k episodes of a task form one group and share the env seed (the same start state), as in
training. An episode "passes" when its reward is at least `pass_threshold` (default: a full
reward of 1.0). Mean reward and pass@k are over every episode: one the policy failed
(`policy_error`, `policy_timeout`, `tampered`) scores the env's failure reward, and one that
failed for infra reasons (env error or timeout, generator error) counts as a failure too (its
failure reward, or 0.0; never a pass), so no failure, the policy's or not, can raise the
score. Both counts are reported beside the means; the episode statistics (tool calls, turns,
tokens) are over the non-infra episodes.

Tasks that name a `kind` (a template group the env sets, e.g. the calculator families'
`mul_add` or `fact`) are also reported per kind (`EvalReport.per_kind`: tasks, episodes,
reward, tool-call rate; `eval/kind/<kind>/reward` in the metrics), so a regression on one kind
shows even when the mean rises (`kind_regressions` compares two evals' kinds).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from forge_agent.types import Group, Trajectory

if TYPE_CHECKING:
    from forge_agent.rollout.runner import RolloutRunner

__all__ = [
    "DEFAULT_PASS_THRESHOLD",
    "KIND_DROP_WARNING",
    "EvalReport",
    "KindResult",
    "TaskResult",
    "evaluate",
    "kind_drop_warnings",
    "kind_regressions",
    "pass_at_k",
]

KIND_DROP_WARNING = 0.1
"""A kind whose held-out reward falls more than this below step 0's is warned about."""

DEFAULT_PASS_THRESHOLD = 1.0 - 1e-9

ProgressFn = Callable[[int, int], None]
"""Called as `progress(episodes_done, episodes_total)` after each finished episode."""
ScoreFn = Callable[[list[Trajectory]], Awaitable[list[Trajectory]]]
"""Scores one group's trajectories (e.g. through a reward actor); returns them scored."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from `n` samples of which `c` passed.

    pass@k = 1 - C(n - c, k) / C(n, k): the chance that at least one of k samples drawn
    without replacement from the n passes. Computed as the numerically stable product
    1 - prod_{i = n - c + 1}^{n} (1 - k / i). Chen et al. 2021, "Evaluating Large Language
    Models Trained on Code" (arXiv:2107.03374), section 2.1.
    """
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass
class TaskResult:
    """One task's `n` episodes, `passed` of them passing (an infra failure never passes)."""

    task_id: str
    n: int
    passed: int
    mean_reward: float
    infra_failures: int


@dataclass
class KindResult:
    """The episodes of one task kind: `tasks` tasks, `episodes` episodes, their mean `reward`
    (failures counted as in the report's mean) and the share with a tool call
    (`tool_call_rate`, over scored episodes; nan when none was scored)."""

    tasks: int
    episodes: int
    reward: float
    tool_call_rate: float


@dataclass
class EvalReport:
    """What an evaluation measured. `mean_reward`, pass@1 and pass@k are over every episode,
    failures of either kind counted as failures (pass@k of a task with fewer than k episodes
    is its pass@n); the episode statistics are over scored (non-infra) episodes."""

    k: int
    num_tasks: int
    num_episodes: int
    mean_reward: float
    pass_at_1: float
    pass_at_k: float
    pass_threshold: float
    tool_call_rate: float  # share of episodes with at least one tool call
    tool_calls_per_episode: float
    mean_episode_tokens: float  # whole episode: prompt, sampled and env tokens
    mean_sampled_tokens: float
    mean_turns: float
    status_counts: dict[str, int]
    infra_failures: int
    tasks_without_scored_episodes: int
    seconds: float = 0.0
    per_task: list[TaskResult] = field(default_factory=list)
    max_reward: float = 0.0  # the best scored episode's reward (0.0 when none was scored)
    num_scored: int = 0  # episodes that are not infra failures
    tools_offered: bool = False  # some episode's env offered tools
    policy_failures: int = 0  # episodes the policy failed (scored with the failure reward)
    first_errors: dict[str, str] = field(default_factory=dict)  # status -> first error text
    segments_per_episode: float = 1.0  # > 1: re-renders (context rewrites, bridge fallbacks)
    per_kind: dict[str, KindResult] = field(default_factory=dict)  # tasks that name a kind

    @classmethod
    def from_groups(
        cls,
        groups: Sequence[Group],
        k: int,
        pass_threshold: float = DEFAULT_PASS_THRESHOLD,
        seconds: float = 0.0,
        kinds: Sequence[str | None] | None = None,
    ) -> EvalReport:
        """Aggregate one group per task (k trajectories each) into a report; `kinds`: each
        group's task kind (None: none), for `per_kind`."""
        scored: list[Trajectory] = []
        per_task: list[TaskResult] = []
        statuses: Counter[str] = Counter()
        first_errors: dict[str, str] = {}
        infra = 0
        rewards: list[float] = []
        for group in groups:
            ok = [t for t in group.trajectories if not t.status.is_infra_failure]
            statuses.update(t.status.value for t in group.trajectories)
            for t in group.trajectories:
                if t.info.get("error"):
                    first_errors.setdefault(t.status.value, str(t.info["error"])[:500])
            failures = len(group.trajectories) - len(ok)
            infra += failures
            scored.extend(ok)
            task_rewards = [_counted_reward(t) for t in group.trajectories]
            rewards.extend(task_rewards)
            per_task.append(
                TaskResult(
                    task_id=group.task_id,
                    n=len(group.trajectories),
                    passed=sum(t.reward >= pass_threshold for t in ok),
                    mean_reward=_mean(task_rewards),
                    infra_failures=failures,
                )
            )
        judged = [r for r in per_task if r.n > 0]
        return cls(
            k=k,
            num_tasks=len(per_task),
            num_episodes=sum(len(g.trajectories) for g in groups),
            mean_reward=_mean(rewards),
            pass_at_1=_mean([pass_at_k(r.n, r.passed, 1) for r in judged]),
            pass_at_k=_mean([pass_at_k(r.n, r.passed, min(k, r.n)) for r in judged]),
            pass_threshold=pass_threshold,
            tool_call_rate=_mean([float(t.tool_call_count > 0) for t in scored]),
            tool_calls_per_episode=_mean([float(t.tool_call_count) for t in scored]),
            mean_episode_tokens=_mean([float(len(t.token_ids)) for t in scored]),
            mean_sampled_tokens=_mean([float(t.num_sampled) for t in scored]),
            mean_turns=_mean([float(len(t.turn_spans)) for t in scored]),
            status_counts=dict(statuses.most_common()),
            infra_failures=infra,
            policy_failures=sum(t.status.is_policy_failure for t in scored),
            tasks_without_scored_episodes=sum(r.infra_failures == r.n for r in per_task),
            seconds=seconds,
            per_task=per_task,
            max_reward=max((t.reward for t in scored), default=0.0),
            num_scored=len(scored),
            tools_offered=any(t.info.get("tools_offered") for t in scored),
            first_errors=first_errors,
            segments_per_episode=_mean([float(len(t.segment_starts)) for t in scored]) or 1.0,
            per_kind=_per_kind(groups, kinds) if kinds else {},
        )

    def as_metrics(self, prefix: str = "eval/") -> dict[str, float]:
        """Flat metrics for a metric logger, e.g. `eval/pass@4`, `eval/status/ok`."""
        metrics = {
            f"{prefix}reward/mean": self.mean_reward,
            f"{prefix}reward/max": self.max_reward,
            f"{prefix}scored_episodes": float(self.num_scored),
            f"{prefix}tools_offered": float(self.tools_offered),
            f"{prefix}pass@1": self.pass_at_1,
            f"{prefix}pass@{self.k}": self.pass_at_k,
            f"{prefix}tool_call_rate": self.tool_call_rate,
            f"{prefix}tool_calls_per_episode": self.tool_calls_per_episode,
            f"{prefix}episode_tokens/mean": self.mean_episode_tokens,
            f"{prefix}sampled_tokens/mean": self.mean_sampled_tokens,
            f"{prefix}turns/mean": self.mean_turns,
            f"{prefix}segments/mean": self.segments_per_episode,
            f"{prefix}infra_failures": float(self.infra_failures),
            f"{prefix}policy_failures": float(self.policy_failures),
            f"{prefix}episodes": float(self.num_episodes),
            f"{prefix}seconds": self.seconds,
        }
        for status, count in self.status_counts.items():
            metrics[f"{prefix}status/{status}"] = float(count)
        for kind, result in self.per_kind.items():
            metrics[f"{prefix}kind/{kind}/reward"] = result.reward
            metrics[f"{prefix}kind/{kind}/tool_call_rate"] = result.tool_call_rate
            metrics[f"{prefix}kind/{kind}/episodes"] = float(result.episodes)
        return metrics

    def kind_lines(self) -> list[str]:
        """One line per task kind: `kind mul_add: reward 0.500, tool_call_rate 0.875 (8
        tasks)`."""
        return [
            f"kind {kind}: reward {r.reward:.3f}, tool_call_rate {r.tool_call_rate:.3f} "
            f"({r.tasks} tasks)"
            for kind, r in self.per_kind.items()
        ]

    def table(self) -> str:
        """A two-column text table of the headline numbers."""
        statuses = ", ".join(f"{s} {c}" for s, c in self.status_counts.items()) or "-"
        rows = [
            ("tasks x k", f"{self.num_tasks} x {self.k} = {self.num_episodes} episodes"),
            ("mean reward", f"{self.mean_reward:.3f}"),
            ("pass@1", f"{self.pass_at_1:.3f}"),
            (f"pass@{self.k}", f"{self.pass_at_k:.3f}"),
            ("tool-call rate", f"{self.tool_call_rate:.3f}"),
            ("tool calls / episode", f"{self.tool_calls_per_episode:.2f}"),
            ("turns / episode", f"{self.mean_turns:.2f}"),
            ("tokens / episode", f"{self.mean_episode_tokens:.1f}"),
            ("segments / episode", f"{self.segments_per_episode:.2f}"),
            ("sampled tokens / episode", f"{self.mean_sampled_tokens:.1f}"),
            ("status", statuses),
            ("policy failures", f"{self.policy_failures} (scored with the failure reward)"),
            ("infra failures", f"{self.infra_failures} (counted as failures)"),
            ("seconds", f"{self.seconds:.1f}"),
            *(
                (f"kind {kind}", f"reward {r.reward:.3f}, tool-call rate "
                 f"{r.tool_call_rate:.3f} ({r.tasks} tasks)")
                for kind, r in self.per_kind.items()
            ),
        ]  # fmt: skip
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)

    def to_json(self) -> dict[str, Any]:
        """The report as plain data (per-task results included)."""
        return asdict(self)


def _per_kind(groups: Sequence[Group], kinds: Sequence[str | None]) -> dict[str, KindResult]:
    """Each kind's tasks, episodes, mean reward and tool-call rate, kinds in sorted order."""
    if len(kinds) != len(groups):
        raise ValueError(f"{len(kinds)} kinds for {len(groups)} groups")
    by_kind: dict[str, list[Group]] = {}
    for group, kind in zip(groups, kinds, strict=True):
        if kind is not None:
            by_kind.setdefault(str(kind), []).append(group)
    out = {}
    for kind in sorted(by_kind):
        episodes = [t for g in by_kind[kind] for t in g.trajectories]
        scored = [t for t in episodes if not t.status.is_infra_failure]
        out[kind] = KindResult(
            tasks=len(by_kind[kind]),
            episodes=len(episodes),
            reward=_mean([_counted_reward(t) for t in episodes]),
            tool_call_rate=_mean([float(t.tool_call_count > 0) for t in scored]),
        )
    return out


def kind_regressions(
    before: dict[str, float], after: dict[str, float], threshold: float = KIND_DROP_WARNING
) -> list[tuple[str, float, float]]:
    """(kind, reward before, reward after) of each kind whose `eval/kind/<kind>/reward` in
    the metrics `after` is more than `threshold` below its value in `before` (e.g. step 0's)."""
    out = []
    for key, was in before.items():
        if not (key.startswith("eval/kind/") and key.endswith("/reward")):
            continue
        now = after.get(key)
        if now is not None and was - now > threshold:
            out.append((key.removeprefix("eval/kind/").removesuffix("/reward"), was, now))
    return out


def kind_drop_warnings(step0: dict[str, float], metrics: dict[str, float], step: int) -> list[str]:
    """The console's warning for each kind of `metrics` (the eval at `step`) more than
    `KIND_DROP_WARNING` below its reward in `step0` (the eval before training)."""
    return [
        f"warning: [eval] step {step}: kind {kind} reward {now:.3f} is {was - now:.3f} below "
        f"step 0's {was:.3f} (more than {KIND_DROP_WARNING:g}; the mean can hide it)"
        for kind, was, now in kind_regressions(step0, metrics)
    ]


def _counted_reward(traj: Trajectory) -> float:
    """The reward an episode counts with in the means: its own, or for an infra failure its
    failure reward (0.0 when none is known)."""
    if traj.status.is_infra_failure:
        return float(traj.info.get("failure_reward", 0.0))
    return traj.reward


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


async def evaluate(
    runner: RolloutRunner,
    tasks: Sequence[dict[str, Any]],
    k: int,
    seed: int = 0,
    progress: ProgressFn | None = None,
    pass_threshold: float = DEFAULT_PASS_THRESHOLD,
    score: ScoreFn | None = None,
) -> EvalReport:
    """Run `k` episodes of every task (one group per task, env seed `seed + task index`) and
    aggregate them into an `EvalReport`. Rewards are the episodes' own, or `score`'s when
    given (an agent program's reward runs in a reward actor).

    Sampling is seeded from `seed` too, so the same policy on the same tasks gives the same
    report (up to the generator's numerics): checkpoints are compared on the same noise.
    Episodes of all tasks share the runner's concurrency limit.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    total = len(tasks) * k
    done = 0
    previous = runner.on_trajectory

    def on_trajectory(traj: Trajectory) -> None:
        nonlocal done
        if previous is not None:
            previous(traj)
        done += 1
        if progress is not None:
            progress(done, total)

    async def one_group(i: int, task: dict[str, Any]) -> Group:
        group = await runner.run_group(task, seed + i, k, sampling_seed=_sampling_seed(seed, i, k))
        if score is None:
            return group
        return Group(task_id=group.task_id, trajectories=list(await score(group.trajectories)))

    runner.on_trajectory = on_trajectory
    started = time.monotonic()
    try:
        groups = await asyncio.gather(*(one_group(i, task) for i, task in enumerate(tasks)))
    finally:
        runner.on_trajectory = previous
    kinds = [task.get("kind") for task in tasks]
    seconds = time.monotonic() - started
    return EvalReport.from_groups(
        groups, k, pass_threshold, seconds, kinds=kinds if any(kinds) else None
    )


def _sampling_seed(seed: int, task_index: int, k: int) -> int:
    """A distinct sampling seed per task; `run_group` adds 1000 per episode and 1 per turn."""
    return (seed * 1_000_003 + task_index * k * 1000) % (2**31)

"""Replay buffer of scored groups, with a staleness bound and backpressure.

The bound (`training.max_policy_lag` = n): no trained token was sampled more than n policy
versions before the policy it trains. A token sampled by version v trained by the policy at
version c has lag c - v; tokens carry their own version (`Trajectory.versions`), so the check
is exact per token, also for an episode whose later turns (or later tokens of one turn, with
partial rollouts) were sampled by newer weights than its first.

Consumes: scored groups from the rollout loop (`put`). Produces: batches of fresh groups for the
trainer (`take`). Waits: `put` waits while the buffer is full; `take` waits until enough fresh
groups are there. Groups too old for the current policy are evicted (and counted) whenever the
buffer is looked at, and an evicted or taken group frees its slot at once, so the two loops
cannot deadlock: a full buffer of stale groups empties on the next `take`.

Admission (`room`): how many groups the rollout loop may start now. On-policy (n = 0) it starts
exactly the groups the next step needs, and none between the trainer taking a batch and the
policy moving on, so no group is sampled that the trainer cannot use (`evicted` stays 0). In
async mode (n > 0) it keeps up to `groups_per_step * (1 + n)` buffered or running; groups that
age past the bound are evicted: that is the bound working, counted in `evicted`.
Without dynamic sampling (`training.dynamic_sampling=false`) a group the advantage filters drop
still takes its slot as an empty group, so a batch of `groups_per_step` groups is the step's
started groups, of which only the kept ones carry trajectories.
`ZeroSignalWatch` bounds the other way a run can sample without training: every group dropped
by the advantage filters (equal rewards, or too few members left after failures).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from forge_agent.types import Group, Trajectory


def group_version(group: Group) -> int:
    """The oldest policy version that sampled any token of the group (per-token exact);
    -1 when no token was sampled."""
    versions = [t.min_version for t in group.trajectories if t.min_version >= 0]
    return min(versions) if versions else -1


def token_lags(trajectory: Trajectory, current_version: int) -> list[int]:
    """`current_version - v` for every sampled token (v = the version that sampled it)."""
    pairs = zip(trajectory.versions, trajectory.loss_mask, strict=True)
    return [current_version - v for v, m in pairs if m]


def check_token_lags(batch: list[Trajectory], version: int, max_policy_lag: int) -> list[int]:
    """Every sampled token's lag for the policy at `version` (`[0]` when none); raises when one
    exceeds `max_policy_lag` (the bound failed: never train on such a batch)."""
    lags = [lag for t in batch for lag in token_lags(t, version)]
    if lags and max(lags) > max_policy_lag:
        raise RuntimeError(
            f"a trained token was sampled {max(lags)} versions before policy {version}, over "
            f"training.max_policy_lag={max_policy_lag}"
        )
    return lags or [0]


class ReplayBuffer:
    """FIFO of scored groups; a group is fresh while every sampled token has
    `current_version - version <= max_policy_lag`.

    `evicted` counts evicted groups, `evicted_trajectories` their trajectories.
    """

    def __init__(self, capacity: int, max_policy_lag: int) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        if max_policy_lag < 0:
            raise ValueError(f"max_policy_lag must be >= 0, got {max_policy_lag}")
        self.capacity = capacity
        self.max_policy_lag = max_policy_lag
        self._groups: deque[Group] = deque()
        self._changed = asyncio.Condition()
        self.current_version = 0  # the newest policy version the buffer has been told of
        self.evicted = 0
        self.evicted_trajectories = 0
        self._served_version = -1  # the policy version the last batch was taken for

    def __len__(self) -> int:
        return len(self._groups)

    async def changed(self) -> None:
        """Wait until the buffer changes: a group put or taken, or a new policy version."""
        async with self._changed:
            await self._changed.wait()

    def room(self, running: int, groups_per_step: int) -> int:
        """How many more groups the rollout loop may start now (`running`: groups in flight).

        On-policy (lag 0): `groups_per_step` minus what is buffered or running, and 0 once the
        batch for the current version has been taken (until `set_version` moves it on): a group
        started then would be sampled by a policy the trainer is replacing, then evicted.
        Async (lag n): up to `groups_per_step * (1 + n)` buffered or running."""
        if self.max_policy_lag == 0 and self._served_version >= self.current_version:
            return 0
        want = groups_per_step * (1 + self.max_policy_lag)
        return max(0, want - len(self._groups) - running)

    def is_fresh(self, group: Group, current_version: int) -> bool:
        """True when every sampled token of `group` is within the bound for `current_version`
        (an empty group, a dropped group's slot, has none to be stale)."""
        if not group.trajectories:
            return True
        return current_version - group_version(group) <= self.max_policy_lag

    async def put(self, group: Group) -> None:
        """Add a group, waiting while the buffer is full (stale groups are evicted first)."""
        async with self._changed:
            self._evict_stale()
            await self._changed.wait_for(lambda: len(self._groups) < self.capacity)
            self._groups.append(group)
            self._changed.notify_all()

    async def set_version(self, current_version: int) -> None:
        """Tell the buffer the policy moved on: evict what became stale and wake waiters."""
        async with self._changed:
            self.current_version = max(self.current_version, current_version)
            self._evict_stale()
            self._changed.notify_all()

    def _evict_stale(self) -> None:
        fresh = [g for g in self._groups if self.is_fresh(g, self.current_version)]
        if len(fresh) == len(self._groups):
            return
        stale = [g for g in self._groups if not self.is_fresh(g, self.current_version)]
        self.evicted += len(stale)
        self.evicted_trajectories += sum(len(g.trajectories) for g in stale)
        self._groups = deque(fresh)

    async def take(self, n: int, current_version: int) -> list[Group]:
        """The `n` oldest groups fresh for `current_version`, waiting until there are that many.

        `n` must fit the buffer (n <= capacity), else it could never be served."""
        if not 1 <= n <= self.capacity:
            raise ValueError(
                f"take({n}) can never be served by a replay buffer of capacity {self.capacity} "
                "(training.groups_per_step must be <= training.replay_capacity)"
            )
        async with self._changed:
            self.current_version = max(self.current_version, current_version)
            while True:
                self._evict_stale()
                self._changed.notify_all()  # eviction may have freed slots
                if len(self._groups) >= n:
                    batch = [self._groups.popleft() for _ in range(n)]
                    self._served_version = self.current_version
                    self._changed.notify_all()
                    return batch
                await self._changed.wait()

    async def reopen(self) -> None:
        """On-policy: admit groups again for the current version after a taken batch had no
        trajectories (every group dropped), so the policy did not move on."""
        async with self._changed:
            self._served_version = -1
            self._changed.notify_all()

    async def take_while(self, producer: asyncio.Task, n: int, current_version: int) -> list[Group]:
        """`take(n, current_version)` while `producer` (the rollout loop filling the buffer)
        runs: its crash is raised here instead of the wait lasting forever."""
        take = asyncio.create_task(self.take(n, current_version))
        done, _ = await asyncio.wait({take, producer}, return_when=asyncio.FIRST_COMPLETED)
        if take not in done:
            take.cancel()
            producer.result()  # raises the producer's error
            raise RuntimeError("the rollout loop stopped")
        return take.result()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Plain data to save with a checkpoint: the buffered groups and the counters."""
        return {
            "groups": [
                {"task_id": g.task_id, "trajectories": [t.to_json() for t in g.trajectories]}
                for g in self._groups
            ],
            "current_version": self.current_version,
            "evicted": self.evicted,
            "evicted_trajectories": self.evicted_trajectories,
        }

    def counts(self) -> dict[str, int]:
        """The eviction counts alone: a `load_state_dict` argument that empties the buffer
        and keeps counting (going back to the start of a run)."""
        return {"evicted": self.evicted, "evicted_trajectories": self.evicted_trajectories}

    def load_state_dict(self, state: dict[str, Any], current_version: int) -> None:
        """Restore `state_dict()` for a run resumed at policy `current_version`: groups that
        the resumed policy may no longer train on are evicted now, so the bound holds across
        a restart (the generator's fresh engine numbering cannot make old groups look new)."""
        self._groups = deque(
            Group(g["task_id"], [Trajectory.from_json(t) for t in g["trajectories"]])
            for g in state.get("groups", [])
        )
        self.evicted = int(state.get("evicted", 0))
        self.evicted_trajectories = int(state.get("evicted_trajectories", 0))
        self.current_version = max(int(state.get("current_version", 0)), current_version)
        self._served_version = -1  # no batch taken yet for the restored version
        self._evict_stale()
        while len(self._groups) > self.capacity:  # a smaller capacity after resume
            dropped = self._groups.popleft()
            self.evicted += 1
            self.evicted_trajectories += len(dropped.trajectories)


class NoTrainingSignal(RuntimeError):
    """`ZeroSignalWatch`'s stop: too many groups in a row were dropped. `reasons` counts their
    dropped trajectories by reason (`AdvantageStats.dropped`: `infra_failure`, `small_group`,
    `truncated`, `zero_variance`); `statuses` counts their episodes by how they ended
    (`Status` value -> n), when the watch was told."""

    def __init__(
        self, message: str, reasons: Mapping[str, int], statuses: Mapping[str, int] | None = None
    ) -> None:
        super().__init__(message)
        self.reasons = dict(reasons)
        self.statuses = dict(statuses or {})  # how the dropped groups' episodes ended

    @property
    def lost_to_failures(self) -> bool:
        """Most dropped trajectories were lost to env, generator or reward failures."""
        failed = self.reasons.get("infra_failure", 0) + self.reasons.get("small_group", 0)
        others = self.reasons.get("zero_variance", 0), self.reasons.get("truncated", 0)
        return failed > max(others)


class ZeroSignalWatch:
    """Counts groups dropped in a row by the advantage filters: such a group carries no learning
    signal, and a run whose every group is dropped samples forever without a step. `observe`
    warns (through `warn`) after `warn_after` such groups in a row and at every doubling, and
    raises after `fail_after`, naming why the groups were dropped (equal rewards, or members lost
    to env/generator/reward failures) and what to change."""

    def __init__(
        self, warn_after: int, fail_after: int, warn: Callable[[str], None] | None = None
    ) -> None:
        self.warn_after = warn_after
        self.fail_after = fail_after
        self.warn = warn or logging.getLogger(__name__).warning
        self.in_a_row = 0
        self.reasons: Counter[str] = Counter()  # dropped trajectories by reason, this streak
        self.statuses: Counter[str] = Counter()  # how this streak's episodes ended
        self._next_warning = warn_after

    def _message(self, rewards: list[float]) -> str:
        last = ", ".join(f"{r:g}" for r in sorted(set(rewards))[:3])
        why = ", ".join(f"{k} {v}" for k, v in self.reasons.most_common()) or "zero_variance"
        head = (
            f"{self.in_a_row} groups in a row were dropped by the advantage filters, so no step "
            f"can be trained (trajectories dropped: {why}; last group's rewards: {last}). "
        )
        failed = self.reasons["infra_failure"] + self.reasons["small_group"]
        if self.reasons["truncated"] > max(self.reasons["zero_variance"], failed):
            return head + (
                "Most were cut short (truncated_turns or truncated_length) and dropped by "
                "advantages.truncated: raise rollout.max_turns, rollout.max_new_tokens_per_turn "
                "or rollout.max_total_tokens so that episodes can end, or set "
                "advantages.truncated=keep."
            )
        if failed > self.reasons["zero_variance"]:
            return head + (
                "Most were lost to env, generator or reward failures: see the status/* and "
                "reward error counts and traces.jsonl; advantages.min_group_size sets how many "
                "good members a group needs."
            )
        ended = self._most_ended()
        if ended is not None:
            return head + (
                f"Most of their episodes ended {ended} ({self.statuses[ended]} of "
                f"{sum(self.statuses.values())}), not by the env's reward: see the status/* "
                "counts and traces.jsonl (the run's stop names the cause)."
            )
        return head + (
            "Their members had equal rewards: the reward may be constant (check the env's "
            "reward and the warm start), or raise training.group_size, or set "
            "advantages.drop_zero_variance=false."
        )

    def _most_ended(self) -> str | None:
        """The status most of this streak's episodes ended with, when it is not `ok`."""
        if not self.statuses:
            return None
        status, _ = max(self.statuses.items(), key=lambda item: (item[1], item[0] != "ok"))
        return None if status == "ok" else status

    def observe(
        self,
        kept: bool,
        rewards: list[float],
        dropped: Mapping[str, int] | None = None,
        statuses: Mapping[str, int] | None = None,
    ) -> None:
        """Record one finished group; `kept`: it survived the filters; `rewards`: its rewards;
        `dropped`: its trajectories the filters dropped, by reason (`AdvantageStats.dropped`);
        `statuses`: its episodes by how they ended (`Status` value -> n)."""
        if kept:
            self.in_a_row, self._next_warning = 0, self.warn_after
            self.reasons.clear()
            self.statuses.clear()
            return
        self.in_a_row += 1
        self.reasons.update(dropped or {"zero_variance": len(rewards)})
        self.statuses.update(statuses or {})
        if self.in_a_row >= self.fail_after:
            raise NoTrainingSignal(self._message(rewards), self.reasons, self.statuses)
        if self.in_a_row >= self._next_warning:
            self.warn(self._message(rewards))
            self._next_warning *= 2

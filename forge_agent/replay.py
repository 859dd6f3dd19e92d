"""Replay buffer of scored groups, with a staleness bound and backpressure.

Consumes: scored groups from the rollout loop (`put`). Produces: batches of fresh groups for the
trainer (`take`). Waits: `put` waits while the buffer is full; `take` waits until enough fresh
groups are there. Groups too old for the current policy are evicted when they are seen, and an
evicted or taken group frees its slot at once, so the two loops cannot deadlock.
"""

from __future__ import annotations

import asyncio
from collections import deque

from forge_agent.types import Group


def group_version(group: Group) -> int:
    """The oldest policy version that sampled any token of the group (per-token exact)."""
    versions = [t.min_version for t in group.trajectories if t.min_version >= 0]
    return min(versions) if versions else -1


class ReplayBuffer:
    """FIFO of scored groups; a group is fresh while `current - version <= max_policy_lag`."""

    def __init__(self, capacity: int, max_policy_lag: int) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        if max_policy_lag < 0:
            raise ValueError(f"max_policy_lag must be >= 0, got {max_policy_lag}")
        self.capacity = capacity
        self.max_policy_lag = max_policy_lag
        self._groups: deque[Group] = deque()
        self._changed = asyncio.Condition()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._groups)

    async def put(self, group: Group) -> None:
        """Add a group, waiting while the buffer is full."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self._groups) < self.capacity)
            self._groups.append(group)
            self._changed.notify_all()

    def _evict_stale(self, current_version: int) -> None:
        fresh = [
            g for g in self._groups if current_version - group_version(g) <= self.max_policy_lag
        ]
        self.evicted += len(self._groups) - len(fresh)
        self._groups = deque(fresh)

    async def take(self, n: int, current_version: int) -> list[Group]:
        """The `n` oldest fresh groups, waiting until there are that many."""
        async with self._changed:
            while True:
                self._evict_stale(current_version)
                self._changed.notify_all()  # eviction may have freed slots
                if len(self._groups) >= n:
                    batch = [self._groups.popleft() for _ in range(n)]
                    self._changed.notify_all()
                    return batch
                await self._changed.wait()

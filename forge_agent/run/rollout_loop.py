"""The rollout side of a run: tasks in, scored groups with advantages out, into the replay buffer.

    rollouts = RolloutLoop(cfg.training, cfg.advantages, cfg.rollout.max_concurrent_episodes,
                           state, runner, services, tasks, buffer, traces, profile)
    task = asyncio.create_task(rollouts.run())     # beside the training loop (`run.controller`)
    rollouts.open.clear()                          # pause new groups (on-policy step, eval)

Each group is `training.group_size` episodes of one task on the train runner, then the reward
service, advantages (`compute_advantages`), the traces and the curriculum; a group sampled by a
policy that a trainer restart went back from (`RunState.epoch`) is discarded. The loop waits on
the generators, env workers and reward actors, and on room in the buffer (`ReplayBuffer.room`:
on-policy, exactly the groups the next step needs; with `training.dynamic_sampling` a dropped
group is replaced, without it it leaves an empty slot in the step's batch).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from forge_agent.algorithms.advantages import compute_advantages
from forge_agent.algorithms.config import AdvantageConfig
from forge_agent.algorithms.replay import ReplayBuffer, ZeroSignalWatch
from forge_agent.env.curriculum import Curriculum
from forge_agent.observability.metrics import record
from forge_agent.run.config import TrainingConfig
from forge_agent.run.runners import record_episode
from forge_agent.run.state import RunState
from forge_agent.run.supervision import ServiceFailed
from forge_agent.types import Group, Trajectory

if TYPE_CHECKING:
    from forge_agent.observability.step_profile import PhaseClock
    from forge_agent.observability.traces import TraceWriter
    from forge_agent.rollout import RolloutRunner
    from forge_agent.run.services import Services

logger = logging.getLogger(__name__)


class RolloutLoop:
    """Keeps up to `rollout.max_concurrent_episodes` episodes running, a group at a time, while
    `open` is set and the buffer has room (see the module docstring)."""

    def __init__(
        self,
        training: TrainingConfig,
        advantages: AdvantageConfig,
        max_concurrent_episodes: int,
        state: RunState,
        runner: RolloutRunner,
        services: Services,
        tasks: Curriculum,
        buffer: ReplayBuffer,
        traces: TraceWriter,
        profile: PhaseClock,
    ) -> None:
        self.training, self.advantages, self.state = training, advantages, state
        self.max_concurrent_episodes = max_concurrent_episodes  # rollout.max_concurrent_episodes
        self.runner, self.services = runner, services
        self.tasks, self.buffer, self.traces, self.profile = tasks, buffer, traces, profile
        self.open = asyncio.Event()  # cleared while the policy changes (on-policy) or evals run
        self.open.set()
        # a filtered group keeps its slot in the step's batch unless dynamic sampling replaces it
        self.dynamic_sampling = training.dynamic_sampling
        gps = training.groups_per_step
        self.zero_signal = ZeroSignalWatch(warn_after=4 * gps, fail_after=25 * gps)

    async def run(self) -> None:
        """Start groups while there is room; a group's exception ends the loop with it."""
        training = self.training
        max_groups = max(1, self.max_concurrent_episodes // training.group_size)
        running: set[asyncio.Task] = set()
        try:
            while True:
                while not self.open.is_set():  # a wake-up may come after it re-closed
                    await self.open.wait()
                room = self.buffer.room(len(running), training.groups_per_step)
                if len(running) < max_groups and room > 0:
                    running.add(asyncio.create_task(self._one_group(*next(self.tasks))))
                    continue
                changed = asyncio.ensure_future(self.buffer.changed())  # a take, a new version
                done, _ = await asyncio.wait(
                    running | {changed}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED
                )
                changed.cancel()
                for finished in done - {changed}:
                    running.discard(finished)
                    finished.result()
        finally:
            for group in running:
                group.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _one_group(self, task: dict[str, Any], seed: int) -> None:
        """G episodes of one task -> reward service -> advantages -> replay buffer."""
        state, counts = self.state, self.state.counts
        epoch = state.epoch
        group = await self.runner.run_group(task, seed, self.training.group_size)
        self.services.raise_if_failed()  # a generator past recovery: stop, naming it
        try:
            with self.profile.phase("reward"):
                scored, reward_metrics = await self.services.score(group.trajectories)
        except ServiceFailed:
            raise
        except Exception as exc:  # the whole reward service failed: mark, do not crash
            counts["reward_service_error"] += 1
            logger.warning("reward scoring failed for %s: %s", group.task_id, exc)
            return
        if epoch != state.epoch:  # sampled by a policy a trainer restart went back from
            counts["groups_discarded_after_restart"] += 1
            return
        for traj in scored:
            self.traces.write(traj, {"step": state.step, "policy_version": state.version})
            record_episode(traj, counts, state.errors)
        for name, value in reward_metrics.items():
            record(name, value)
        self._observe_curriculum(task, scored)
        kept, stats = compute_advantages([Group(group.task_id, list(scored))], self.advantages)
        for name, value in stats.as_metrics().items():
            record(name, value, "sum")
        counts["groups_produced"] += 1
        statuses = Counter(t.status.value for t in scored)
        self.zero_signal.observe(bool(kept), [t.reward for t in scored], stats.dropped, statuses)
        if kept:
            await self.buffer.put(Group(task_id=group.task_id, trajectories=kept))
            return
        counts["groups_filtered"] += 1
        if not self.dynamic_sampling:  # it keeps its slot in the step's batch
            await self.buffer.put(Group(task_id=group.task_id, trajectories=[]))

    def _observe_curriculum(self, task: dict[str, Any], scored: list[Trajectory]) -> None:
        """The group's rewards (infra failures left out) to the curriculum; a move up the
        ladder is printed."""
        rewards = [t.reward for t in scored if not t.status.is_infra_failure]
        if self.tasks.observe(task, rewards):
            level = f"{self.tasks.kwarg}={self.tasks.level!r}"
            print(f"[curriculum] step {self.state.step}: training tasks now at {level}", flush=True)
        for name, value in self.tasks.metrics().items():
            record(name, value, "last")

"""The multi-turn rollout runner: episodes as independent async tasks, grouped per task.

One episode (token-in/token-out, every token accounted for; the loop is
`forge_agent.rollout.episode.Episode`, the token record `forge_agent.rollout.history`):

    env.reset(task, seed) -> messages, tools -> render prompt ids
    loop: generate(prompt ids) -> completion ids, logprobs, version
          parse -> assistant message -> env.step -> tool/user messages (or done)
          bridge_to_next_turn (append-only) -> next prompt ids
    -> Trajectory(token ids, loss mask, sampler logprobs, per-token versions, status, rewards)

The runner runs many episodes at once, each its own asyncio task: a finished episode frees its
slot at once and the next one starts (no lock-step turns across a batch). G episodes of one
task form a group and share the env seed, hence the env start state.

Consumes: tasks (dicts) and seeds. Produces: `Group`s of `Trajectory`s. Waits on: the
generator (`GenerateFn`) and env workers (`EnvSource`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from forge_agent.env.protocol import EnvSource, EpisodeEnv
from forge_agent.generator.config import GenerateFn, SamplingConfig
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.episode import Episode
from forge_agent.rollout.game import SOLO, START_STATE, EpisodeContext, Seat, SoloGame
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.types import Group, Status, Trajectory

__all__ = ["START_STATE", "RolloutRunner", "SessionRouter"]


class RolloutRunner:
    """Runs episodes of one env against one generate function.

    `max_model_len`: the generator's context length (its setup answer); an episode's budget is
    the smaller of it and `config.max_total_tokens`. `adapter_field`: the task field naming the
    LoRA adapter that plays each episode (`trainer.lora.route`; None: the policy's only one).
    `players`: for a multi-seat env (`forge_agent.env.SeatEnv`), who plays each seat (None:
    the policy; see `forge_agent.rollout.players`); its episodes yield one trajectory per
    policy seat. None: one-seat envs. Both run the one loop, `forge_agent.rollout.episode`.
    """

    def __init__(
        self,
        generate: GenerateFn,
        envs: EnvSource,
        renderer: ChatRenderer,
        config: RolloutConfig | None = None,
        on_trajectory: Callable[[Trajectory], None] | None = None,
        max_model_len: int | None = None,
        adapter_field: str | None = None,
        players: dict[str, Any] | None = None,
    ) -> None:
        self.generate = generate
        self.adapter_field = adapter_field
        self.players = players
        self.envs = envs
        self.renderer = renderer
        self.config = config or RolloutConfig()
        self.on_trajectory = on_trajectory
        self.max_model_len = max_model_len
        self._slots = asyncio.Semaphore(self.config.max_concurrent_episodes)
        self._compactor = self.config.context.compactor()
        self.stats: dict[str, float] = {"episodes": 0, "bridge_fallbacks": 0, "generate_s": 0.0}

    def episode_context(self) -> EpisodeContext:
        """What the episode loop needs of this runner (built per episode: limits may change)."""
        cfg = self.config
        return EpisodeContext(
            generate=self.generate,
            renderer=self.renderer,
            config=cfg,
            limit=min(cfg.max_total_tokens, self.max_model_len or cfg.max_total_tokens),
            compactor=self._compactor,
            stats=self.stats,
        )

    # ------------------------------------------------------------------ one episode
    async def run_episode(
        self,
        task: dict[str, Any],
        seed: int | None = None,
        group_id: str | None = None,
        sampling_seed: int | None = None,
    ) -> list[Trajectory]:
        """One episode of `task`: its policy seats' trajectories, in seat order (one for a
        one-seat env; with `players`, the seats that moved, each with `info["seat"]`,
        `info["episode_id"]`, `info["players"]`). Never raises for env, tool or generator
        failures: they become the trajectories' status."""
        group_id = group_id or uuid.uuid4().hex[:12]
        seats = self._seats(task, group_id)
        trajs = [s.traj for s in seats.values() if s.traj is not None]
        if self.players is None and self.adapter_field is not None:
            (traj,) = trajs
            traj.adapter = task.get(self.adapter_field)
            if not isinstance(traj.adapter, str):
                error = (
                    f"task {traj.task_id!r} has no adapter name in field "
                    f"{self.adapter_field!r} (trainer.lora.route)"
                )
                traj.status, traj.info["error"] = Status.ENV_ERROR, error
                return [self._finish(traj)]

        async def body(env: EpisodeEnv) -> None:
            await self._play(env, seats, task, seed, sampling_seed)

        await self._with_env(trajs, body)
        if self.players is not None:  # a seat the game ended before it moved has nothing to train
            trajs = [t for t in trajs if t.turn_spans or t.status.is_infra_failure]
        return [self._finish(t) for t in trajs]

    def _seats(self, task: dict[str, Any], group_id: str) -> dict[str, Seat]:
        """The episode's seats: `SOLO` for a one-seat env, else one per `players` entry; a
        policy seat (player None) gets its trajectory."""
        task_id = str(task.get("task_id", "task"))
        if self.players is None:
            return {SOLO: Seat(SOLO, traj=Trajectory(task_id=task_id, group_id=group_id))}
        episode_id = uuid.uuid4().hex[:10]
        labels = {s: "policy" if p is None else p.label for s, p in self.players.items()}
        seats = {}
        for name, player in self.players.items():
            traj = None
            if player is None:  # a policy seat: it writes a trajectory
                traj = Trajectory(task_id=task_id, group_id=group_id)
                traj.info.update(seat=name, episode_id=episode_id, players=labels)
                traj.adapter = _seat_adapter(self.adapter_field, name, task)
            seats[name] = Seat(name, player=player, traj=traj)
        return seats

    async def _play(
        self,
        env: Any,
        seats: dict[str, Seat],
        task: dict[str, Any],
        seed: int | None,
        sampling_seed: int | None,
    ) -> None:
        """Play one episode of `env` (a one-seat env as a `SoloGame`) into the seats'
        trajectories (agent programs play otherwise: `AgentRolloutRunner`)."""
        game = SoloGame(env) if self.players is None else env
        await Episode(self.episode_context(), game, seats).play(task, seed, sampling_seed)

    async def _with_env(
        self, trajs: list[Trajectory], body: Callable[[Any], Awaitable[None]]
    ) -> None:
        """Run `body` on an env from the source, under the runner's concurrency limit; an env
        that cannot start ends every trajectory with its status; the env is always closed."""
        async with self._slots:
            started = time.monotonic()
            try:
                env = await self.envs.acquire()
            except Exception as exc:  # a worker that cannot even start
                configured = getattr(getattr(self.envs, "env", None), "failure_reward", None)
                for traj in trajs:
                    traj.status, traj.info["error"] = _failure_status(exc), f"env start: {exc}"
                    if configured is not None:  # no env to ask: `env.failure_reward` if set
                        traj.info["failure_reward"] = float(configured)
            else:
                try:
                    await body(env)
                finally:
                    try:
                        await env.close()
                    except Exception as exc:  # closing must not lose the trajectory
                        for traj in trajs:
                            traj.info.setdefault("close_error", str(exc))
                failure_reward = float(getattr(env, "failure_reward", 0.0))
                for traj in trajs:  # eval counts an infra episode as a failure at this reward;
                    traj.info.setdefault("failure_reward", failure_reward)  # a judge's, too
            for traj in trajs:
                traj.timings["total_s"] = time.monotonic() - started

    def _finish(self, traj: Trajectory) -> Trajectory:
        """A finished episode: its reward is the sum of its components; counted and handed to
        `on_trajectory`."""
        traj.reward = sum(traj.reward_components.values())
        self.stats["episodes"] += 1
        self.stats["bridge_fallbacks"] += traj.info.get("bridge_fallbacks", 0)
        if self.on_trajectory is not None:
            self.on_trajectory(traj)
        return traj

    # ------------------------------------------------------------------ groups
    async def run_group(
        self, task: dict[str, Any], seed: int, group_size: int, sampling_seed: int | None = None
    ) -> Group:
        """`group_size` episodes of `task`, all from the same env seed (same start state);
        with `players`, the policy seats' trajectories of each episode (`info["seat"]`)."""
        group_id = f"{task.get('task_id', 'task')}-{uuid.uuid4().hex[:8]}"
        seeds = [
            None if sampling_seed is None else sampling_seed + 1000 * i for i in range(group_size)
        ]
        episodes = await asyncio.gather(*(self.run_episode(task, seed, group_id, s) for s in seeds))
        trajectories = [t for episode in episodes for t in episode]
        return Group(task_id=str(task.get("task_id", "task")), trajectories=trajectories)

    async def stream_groups(
        self, tasks: Iterable[tuple[dict[str, Any], int]], group_size: int
    ) -> AsyncIterator[Group]:
        """Groups of `(task, seed)` pairs in the order they finish; episodes of all groups
        share the runner's concurrency limit."""
        pending = {
            asyncio.ensure_future(self.run_group(task, seed, group_size)) for task, seed in tasks
        }
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
        finally:
            for fut in pending:
                fut.cancel()

    async def run_groups(
        self, tasks: Iterable[tuple[dict[str, Any], int]], group_size: int
    ) -> list[Group]:
        return [g async for g in self.stream_groups(tasks, group_size)]


def _seat_adapter(route: str | None, seat: str, task: dict[str, Any]) -> str | None:
    """The LoRA adapter a policy seat plays (`trainer.lora.route`): "seat" gives each seat the
    adapter of its name (one adapter per player), a task field the adapter it names, None the
    policy's only one."""
    if route is None:
        return None
    return seat if route == "seat" else task.get(route)


def _failure_status(exc: BaseException) -> Status:
    status = getattr(exc, "status", None)
    return status if isinstance(status, Status) else Status.ENV_ERROR


class SessionRouter:
    """Routes requests over generator replicas, keeping each session on one replica (prefix
    cache hits); a new session goes to the replica with the fewest requests in flight."""

    def __init__(self, replicas: list[Any]) -> None:
        if not replicas:
            raise ValueError("SessionRouter needs at least one generator replica")
        self.replicas = replicas
        self._load = [0] * len(replicas)
        self._sessions: dict[str, int] = {}

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig, session: str):
        index = self._sessions.get(session)
        if index is None:
            index = min(range(len(self.replicas)), key=self._load.__getitem__)
            self._sessions[session] = index
            if len(self._sessions) > 100_000:  # forget the oldest sessions
                for key in list(self._sessions)[:50_000]:
                    del self._sessions[key]
        self._load[index] += 1
        try:
            return await self.replicas[index].generate.call_one(prompt_ids, sampling, session)
        finally:
            self._load[index] -= 1

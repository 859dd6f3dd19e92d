"""The multi-turn rollout engine: episodes as independent async tasks, grouped per task.

One episode (token-in/token-out, every token accounted for):

    env.reset(task, seed) -> messages, tools -> render prompt ids
    loop: generate(prompt ids) -> completion ids, logprobs, version
          parse -> assistant message -> env.step -> tool/user messages (or done)
          bridge_to_next_turn (append-only) -> next prompt ids
    -> Trajectory(token ids, loss mask, sampler logprobs, per-token versions, status, rewards)

The engine runs many episodes at once, each its own asyncio task: a finished episode frees its
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
from dataclasses import dataclass
from typing import Any, Protocol

from forge_agent.env.protocol import step_failure
from forge_agent.generator.config import SamplingConfig
from forge_agent.rollout.renderer import ChatRenderer, clean_text
from forge_agent.types import Completion, Group, Message, Status, StepResult, ToolSpec, Trajectory

GenerateFn = Callable[[list[int], SamplingConfig, str], Awaitable[Completion]]
"""Anything that maps (prompt ids, sampling, session id) to a completion: the generator actor,
a router over replicas, or an in-process engine."""


START_STATE = "<start>"
"""`Trajectory.turn_states[0]`: the state an episode starts from, the same for a whole group."""


class EpisodeEnv(Protocol):
    """One episode's env (an `AgentEnv` whose `close()` ends the episode)."""

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]: ...

    async def step(self, assistant_message: Message) -> StepResult: ...

    async def close(self) -> None: ...


class EnvSource(Protocol):
    """Where episodes get their env: an `EnvPool`, or `LocalEnvs` for in-process envs."""

    async def acquire(self) -> EpisodeEnv: ...


class LocalEnvs:
    """Envs built in this process by `factory()`, one per episode (tests, benchmarks)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory

    async def acquire(self) -> EpisodeEnv:
        return self.factory()


@dataclass
class RolloutConfig:
    """Limits and sampling of one episode, and how many episodes run at once."""

    max_turns: int = 4
    max_total_tokens: int = 512  # prompt + every turn, per segment
    max_new_tokens_per_turn: int = 48  # shrinks as the budget is spent
    tool_output_tokens: int = 64  # each tool/user message the env returns is cut to this
    max_concurrent_episodes: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    # multi-seat games: a seat that leaves the game unfinished (its move cut at the token cap
    # or the budget, or its `max_turns` spent) loses it by forfeit, scoring `forfeit_reward`
    # (None: the env's `failure_reward`); its trajectory ends `forfeit` and is trained on.
    # `forfeit: false` ends such games truncated instead (`advantages.truncated` applies): an
    # escape from a losing game unless truncated episodes are masked out of the baseline too.
    forfeit: bool = True
    forfeit_reward: float | None = None

    def __post_init__(self) -> None:
        from forge_agent.typed_config import check_field

        for key in ("max_turns", "max_total_tokens", "max_new_tokens_per_turn"):
            check_field(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")
        for key in ("tool_output_tokens", "max_concurrent_episodes"):
            check_field(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")
        check_field(self.temperature > 0.0, "temperature", self.temperature, "a float > 0")
        check_field(0.0 < self.top_p <= 1.0, "top_p", self.top_p, "a float in (0, 1]")


class RolloutEngine:
    """Runs episodes of one env against one generate function.

    `max_model_len`: the generator's context length (its setup answer); an episode's budget is
    the smaller of it and `config.max_total_tokens`. `adapter_field`: the task field naming the
    LoRA adapter that plays each episode (`trainer.lora.route`; None: the policy's only one).
    `players`: for a multi-seat env (`forge_agent.env.SeatEnv`), who plays each seat (None:
    the policy; see `forge_agent.rollout.players`); its episodes run in
    `forge_agent.rollout.seats` and yield one trajectory per policy seat. None: one-seat envs.
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
        self.stats: dict[str, float] = {"episodes": 0, "bridge_fallbacks": 0, "generate_s": 0.0}

    # ------------------------------------------------------------------ one episode
    async def run_episode(
        self,
        task: dict[str, Any],
        seed: int | None = None,
        group_id: str | None = None,
        sampling_seed: int | None = None,
    ) -> Trajectory:
        """One episode of `task`; never raises for env, tool or generator failures (they
        become the trajectory's status)."""
        async with self._slots:
            traj = Trajectory(
                task_id=str(task.get("task_id", "task")),
                group_id=group_id or uuid.uuid4().hex[:12],
            )
            started = time.monotonic()
            if self.adapter_field is not None:
                traj.adapter = task.get(self.adapter_field)
                if not isinstance(traj.adapter, str):
                    error = (
                        f"task {traj.task_id!r} has no adapter name in field "
                        f"{self.adapter_field!r} (trainer.lora.route)"
                    )
                    return self._finish(traj, Status.ENV_ERROR, error, started)
            try:
                env = await self.envs.acquire()
            except Exception as exc:  # a worker that cannot even start
                return self._finish(traj, _failure_status(exc), f"env start: {exc}", started)
            try:
                await self._play(env, task, seed, traj, sampling_seed)
            finally:
                try:
                    await env.close()
                except Exception as exc:  # closing must not lose the trajectory
                    traj.info.setdefault("close_error", str(exc))
            return self._finish(traj, traj.status, None, started)

    def _finish(
        self, traj: Trajectory, status: Status, error: str | None, started: float
    ) -> Trajectory:
        traj.status = status
        if error:
            traj.info["error"] = error
        traj.reward = sum(traj.reward_components.values())
        traj.timings["total_s"] = time.monotonic() - started
        self.stats["episodes"] += 1
        if self.on_trajectory is not None:
            self.on_trajectory(traj)
        return traj

    async def _play(
        self,
        env: EpisodeEnv,
        task: dict[str, Any],
        seed: int | None,
        traj: Trajectory,
        sampling_seed: int | None,
    ) -> None:
        cfg = self.config
        session = f"{traj.group_id}-{uuid.uuid4().hex[:6]}"
        env_s = 0.0
        gen_s = 0.0
        t0 = time.monotonic()
        try:
            messages, tools = await env.reset(task, seed)
        except Exception as exc:
            traj.status, traj.info["error"] = _failure_status(exc), f"reset: {exc}"
            return
        env_s += time.monotonic() - t0
        messages = list(messages)
        traj.messages = messages
        traj.info["tools_offered"] = len(tools)
        try:
            context = self.renderer.render_prompt(messages, tools)  # the current segment
        except Exception as exc:
            traj.status, traj.info["error"] = Status.ENV_ERROR, f"render: {exc!r}"
            return
        self._append(traj, context, sampled=False)
        limit = min(cfg.max_total_tokens, self.max_model_len or cfg.max_total_tokens)
        if len(context) >= limit:
            traj.status = Status.PROMPT_TOO_LONG
            traj.info["error"] = f"prompt of {len(context)} tokens >= budget of {limit}"
            return
        traj.status = Status.TRUNCATED_TURNS
        traj.turn_states = [START_STATE]  # every episode of a group starts from the same state
        for turn in range(cfg.max_turns):
            budget = limit - len(context)
            if budget <= 0:
                traj.status = Status.TRUNCATED_LENGTH
                break
            sampling = self.turn_sampling(traj, budget, turn, sampling_seed)
            t0 = time.monotonic()
            try:
                completion = await self.generate(list(context), sampling, session)
            except Exception as exc:
                traj.status, traj.info["error"] = Status.GENERATOR_ERROR, f"generate: {exc}"
                break
            finally:
                gen_s += time.monotonic() - t0
            if completion.finish_reason == "abort":
                traj.status, traj.info["error"] = Status.GENERATOR_ERROR, "request aborted"
                break
            start = len(traj.token_ids)
            self._append(traj, completion.token_ids, sampled=True, completion=completion)
            traj.turn_spans.append((start, len(traj.token_ids)))
            try:  # parse never raises by contract; a bug there must not end the run
                assistant = self.renderer.parse(
                    completion.token_ids, tools, context, call_prefix=f"call_{turn}"
                )
            except Exception as exc:
                traj.status, traj.info["error"] = Status.ENV_ERROR, f"parse: {exc!r}"
                break
            messages.append(assistant)
            if completion.finish_reason == "length":
                traj.status = Status.TRUNCATED_LENGTH
                break
            t0 = time.monotonic()
            try:
                result = await env.step(assistant)
            except Exception as exc:
                status, failure_reward = step_failure(exc, env)
                if status.is_policy_failure:
                    traj.fail_by_policy(status, f"step: {exc}", failure_reward)
                else:
                    traj.status, traj.info["error"] = status, f"step: {exc}"
                break
            finally:
                env_s += time.monotonic() - t0
            self._record_step(traj, result, turn)
            if result.done:
                traj.status = Status.OK
                break
            new_messages = [self._cut(m) for m in result.messages]
            messages.extend(new_messages)
            try:
                bridged = self.renderer.bridge(context, completion.token_ids, new_messages, tools)
            except Exception as exc:  # fall back to a full render, noted
                traj.info["bridge_error"] = repr(exc)[:300]
                bridged = None
            if bridged is not None:
                self._append(traj, bridged[len(context) + len(completion.token_ids) :], False)
                context = bridged
            else:  # full re-render: a new training segment starts here
                self.stats["bridge_fallbacks"] += 1
                traj.info["bridge_fallbacks"] = traj.info.get("bridge_fallbacks", 0) + 1
                try:
                    context = self.renderer.render_prompt(messages, tools)
                except Exception as exc:
                    traj.status, traj.info["error"] = Status.ENV_ERROR, f"render: {exc!r}"
                    break
                traj.segment_starts.append(len(traj.token_ids))
                self._append(traj, context, sampled=False)
        turns = len(traj.turn_spans)  # per-turn lists end with the last turn sampled
        traj.turn_states = traj.turn_states[:turns]
        traj.turn_rewards = (traj.turn_rewards + [0.0] * turns)[:turns]
        traj.timings["env_s"] = env_s
        traj.timings["generate_s"] = gen_s
        self.stats["generate_s"] += gen_s

    def turn_sampling(
        self, traj: Trajectory, budget: int, turn: int, sampling_seed: int | None
    ) -> SamplingConfig:
        """The sampling of `traj`'s turn `turn`: at most `budget` new tokens (and the per-turn
        cap), the run's temperature and top-p, the renderer's stop tokens, a per-turn seed when
        `sampling_seed` is set, and the trajectory's LoRA adapter."""
        cfg = self.config
        return SamplingConfig(
            max_tokens=min(cfg.max_new_tokens_per_turn, budget),
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            stop_token_ids=self.renderer.stop_token_ids,
            seed=None if sampling_seed is None else sampling_seed + turn,
            adapter=traj.adapter,
        )

    @staticmethod
    def _append(
        traj: Trajectory,
        ids: list[int],
        sampled: bool,
        completion: Completion | None = None,
    ) -> None:
        traj.token_ids.extend(ids)
        if sampled:
            assert completion is not None
            traj.loss_mask.extend([1] * len(ids))
            traj.logprobs.extend(completion.logprobs)
            traj.versions.extend(completion.token_versions())
        else:
            traj.loss_mask.extend([0] * len(ids))
            traj.logprobs.extend([0.0] * len(ids))
            traj.versions.extend([-1] * len(ids))

    @staticmethod
    def _record_step(traj: Trajectory, result: StepResult, turn: int) -> None:
        """Rewards, tool counts and info of the env's answer to `turn`; the rewards also go to
        `turn_rewards[turn]` and the env's key of the state it left to `turn_states[turn + 1]`."""
        for name, value in result.rewards.items():
            traj.reward_components[name] = traj.reward_components.get(name, 0.0) + float(value)
        info = dict(result.info)
        while len(traj.turn_rewards) <= turn:
            traj.turn_rewards.append(0.0)
        traj.turn_rewards[turn] += sum(float(v) for v in result.rewards.values())
        next_state = info.pop("state_key", None)
        traj.turn_states.append(None if next_state is None else str(next_state))
        traj.tool_call_count += int(info.pop("tool_calls", 0) or 0)
        traj.tool_error_count += int(info.pop("tool_errors", 0) or 0)
        traj.info.update(info)

    def _cut(self, message: Message) -> Message:
        """An env message made safe to render: text fields without lone surrogates, content
        cut to `tool_output_tokens` (by characters if the tokenizer still refuses it)."""
        message = {k: clean_text(v) if isinstance(v, str) else v for k, v in message.items()}
        content = message.get("content")
        if not isinstance(content, str):
            return message
        limit = self.config.tool_output_tokens
        try:
            cut = self.renderer.truncate_text(content, limit)
        except Exception:
            keep = 4 * limit
            cut = content if len(content) <= keep else content[:keep] + "\n...[truncated]"
        return {**message, "content": cut}

    # ------------------------------------------------------------------ groups
    async def run_group(
        self, task: dict[str, Any], seed: int, group_size: int, sampling_seed: int | None = None
    ) -> Group:
        """`group_size` episodes of `task`, all from the same env seed (same start state);
        with `players`, the policy seats' trajectories of each episode (`info["seat"]`)."""
        group_id = f"{task.get('task_id', 'task')}-{uuid.uuid4().hex[:8]}"
        if self.players:
            from forge_agent.rollout.seats import run_seated_episode

            episodes = await asyncio.gather(
                *(
                    run_seated_episode(
                        self,
                        self.players,
                        task,
                        seed,
                        group_id,
                        None if sampling_seed is None else sampling_seed + 1000 * i,
                    )
                    for i in range(group_size)
                )
            )
            trajectories = [t for episode in episodes for t in episode]
            return Group(task_id=str(task.get("task_id", "task")), trajectories=trajectories)
        trajectories = await asyncio.gather(
            *(
                self.run_episode(
                    task,
                    seed,
                    group_id,
                    None if sampling_seed is None else sampling_seed + 1000 * i,
                )
                for i in range(group_size)
            )
        )
        return Group(task_id=str(task.get("task_id", "task")), trajectories=list(trajectories))

    async def stream_groups(
        self, tasks: Iterable[tuple[dict[str, Any], int]], group_size: int
    ) -> AsyncIterator[Group]:
        """Groups of `(task, seed)` pairs in the order they finish; episodes of all groups
        share the engine's concurrency limit."""
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

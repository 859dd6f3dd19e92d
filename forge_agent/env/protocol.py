"""The agent-env protocol: messages in, messages out; and base classes that make writing one easy.

An agent env never sees tokens. One episode:

    messages, tools = await env.reset(task, seed)     # prompt messages + tool schemas
    result = await env.step(assistant_message)        # -> StepResult(messages, rewards, done, info)
    ...                                               # until result.done
    await env.close()

Rewards are named components (`{"correct": 1.0}`), reported in the StepResult that has
`done=True` and, for envs with intermediate rewards, at any earlier step too: the rollout engine
keeps them per turn (`Trajectory.turn_rewards`) for turn-level credit, and the episode's reward
is their sum. The outcome goes in `info["outcome"]`. `info["state_key"]` (optional) names the
env state a step left the episode in (hashable to a string; `ToolEnv` fills it from the env's
`state_key()`): turns of a group that start from equal keys form GiGPO's step-level groups.
`info["tool_calls"]` and `info["tool_errors"]` count the tool calls of that step (sum them for
the episode).
An env that cannot go on raises. Whose failure that is follows one rule (`step_failure`,
docs/rewards.md): an exception from `step` (a judge that cannot parse the answer, a grader, a
tool) is the policy's (`policy_error`, scored with the env's `failure_reward`, default 0.0);
raise `forge_agent.errors.InfraError` for what the policy cannot cause (a sandbox or server
that does not start), which ends the episode `env_error` and leaves it out of training.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from forge_agent.errors import InfraError, PolicyTimeout, TamperingError
from forge_agent.toolkit.toolset import ToolSet
from forge_agent.types import Message, SeatStart, SeatStep, Status, StepResult, ToolSpec

__all__ = [
    "AgentEnv",
    "Env",
    "EnvFailure",
    "EnvSource",
    "EpisodeEnv",
    "LocalEnvs",
    "SeatEnv",
    "ToolEnv",
    "env_seats",
    "maybe_await",
    "message_text",
    "step_failure",
]

T = TypeVar("T")


@runtime_checkable
class AgentEnv(Protocol):
    """What the rollout engine drives: an env that speaks chat messages."""

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        """Start an episode of `task`; return the prompt messages and the tools' schemas."""
        ...

    async def step(self, assistant_message: Message) -> StepResult:
        """Answer one assistant message with tool/user messages, rewards, done and info."""
        ...

    async def close(self) -> None:
        """Release the env's resources (sandboxes, sockets, processes)."""
        ...


class EnvFailure(Exception):
    """An env could not answer. `status` says whose failure it was (`forge_agent.types.Status`):
    a step that raised on the policy's message (`policy_error`) or ran past its deadline
    (`policy_timeout`) is the policy's, scored with `reward` (the env's failure reward); a
    worker that died, a reset or start that failed or hung (`env_error`, `env_timeout`) is
    infra, excluded from baselines and losses.
    """

    def __init__(self, status: Status, message: str, reward: float | None = None) -> None:
        super().__init__(message)
        self.status = Status(status)
        self.message = message
        self.reward = reward

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.status, self.message, self.reward))

    def __str__(self) -> str:
        return f"[{self.status.value}] {self.message}"


def step_failure(exc: BaseException, env: object) -> tuple[Status, float]:
    """Whose failure a step that raised `exc` is, and the failure reward it scores (the rule of
    blame, docs/rewards.md): an `EnvFailure` says so itself; an `InfraError` (a sandbox that
    does not start, a server that is down) or `MemoryError` is infra (`env_error`); anything
    else an env raises while acting on the policy's message (a judge parsing its answer, a
    grader, a tool) is the policy's (`policy_error`), a `PolicyTimeout` (a sandboxed judge past
    its limit) is `policy_timeout`, and a `TamperingError` (the grader caught its code
    interfering) is `tampered`, all scored with the env's `failure_reward`."""
    reward = getattr(exc, "reward", None)
    if reward is None:
        reward = float(getattr(env, "failure_reward", 0.0))
    if isinstance(exc, EnvFailure):
        return exc.status, reward
    if isinstance(exc, TamperingError):
        return Status.TAMPERED, reward
    if isinstance(exc, PolicyTimeout):
        return Status.POLICY_TIMEOUT, reward
    if isinstance(exc, InfraError | MemoryError):
        return Status.ENV_ERROR, reward
    return Status.POLICY_ERROR, reward


async def maybe_await(value: T | Awaitable[T]) -> T:
    """`await value` if it is awaitable, else `value` (lets hooks be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value  # type: ignore[return-value]


def message_text(message: Message) -> str:
    """The text of a message's content (a string, None, or a list of OpenAI content parts)."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def _as_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await maybe_await(fn(*args, **kwargs))

    return wrapper


class Env:
    """Base class for agent envs; `reset`, `step` and `close` may be written sync or async.

    A subclass that defines, say, `def step(self, message)` gets it wrapped into a coroutine,
    so callers always `await env.step(...)`. Env instances run inside env workers, so blocking
    there does not stall training.

    `default_task(seed)` gives the task to use when none is passed (Gymnasium's `reset(seed=)`
    and OpenEnv's `reset()` carry no task); override it in envs that generate tasks.

    What training needs besides reset/step (the env seam; `forge_agent.env.tasks`,
    `forge_agent.warm_start` and `forge_agent.models.tiny` read these, on any env class):

    - tasks, one of:
      `tasks(self, split, n, seed) -> list[dict]`: up to `n` tasks of `split` ("train" or
      "eval") from `seed`; fewer is fine (`forge_agent.env.holdout` keeps a split's share of
      generated tasks by a hash of their content), or
      `dataset`: a `forge_agent.env.Dataset`, a hub name / local json, jsonl, parquet or csv
      path, or a list of task dicts (the config's `env.dataset` / `env.fields` override it).
    - `required_fields`: task fields the env reads; tasks lacking one are refused at load
      time with the env id, the source and the field (`"a|b"`: either field).
    - optional `demonstrations(self, n, seed, demo_fraction) -> list[conversation]`: chat
      conversations (message lists, or `(messages, tool_specs)` pairs) for the supervised warm
      start; `demo_fraction` is the share that should use the tools. Without it the warm start
      is skipped with one log line.
    - optional `demonstrations_origin(self) -> (env_id, kwargs) | None`: the env whose
      demonstrations `demonstrations()` gives (an OpenEnv URL: the env its server serves; an
      agent program: its `tasks_from` env); the warm start's cache is keyed by it.
    - optional `corpus(self) -> list[str | conversation]`: text for the tiny model's tokenizer;
      without it the env's rendered reset messages and tool specs are used.
    - optional `state_key(self) -> str`: a key of the env's current state (e.g. frozen_lake's
      position), equal exactly when two episodes of a group stand in the same state; needed by
      `advantages.turn_credit=gigpo`. `ToolEnv` reports it after each step.
    - optional `shares_event_loop` (a bool, or a function of the env's keyword arguments):
      true for envs that never block their event loop; a worker then runs all its instances
      as tasks on one loop instead of a thread each (agent programs have it).
    - optional `close_shared()` (a static or class method, sync or async): releases what the
      env's instances share on the event loop it runs on (agent programs: their loopback HTTP
      client); a worker calls it on each of its loops, after closing the instances there,
      before closing that loop.
    - `failure_reward` (default 0.0): what an episode scores when the policy's output makes
      `step` raise or run past `env.step_timeout_s` (`policy_error`, `policy_timeout`); no
      more than any answer earns, so failing never pays (`env.failure_reward` overrides it).
    - `tool_timeout_s` (`ToolEnv`) and optional `grader_timeout_s`: the deadlines of one tool
      call and of grading inside a step; a run refuses a config whose `env.step_timeout_s`
      is not above them (timeouts in layers: tool < grader < step).
    """

    _ASYNC_METHODS: ClassVar[tuple[str, ...]] = ("reset", "step", "close")
    failure_reward: ClassVar[float] = 0.0
    dataset: Any = None
    required_fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls._ASYNC_METHODS:
            fn = cls.__dict__.get(name)
            if callable(fn) and not inspect.iscoroutinefunction(fn):
                setattr(cls, name, _as_async(fn))

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        raise NotImplementedError(f"{type(self).__name__} must implement reset(task, seed)")

    async def step(self, assistant_message: Message) -> StepResult:
        raise NotImplementedError(f"{type(self).__name__} must implement step(assistant_message)")

    async def close(self) -> None:
        return None

    def default_task(self, seed: int) -> dict[str, Any]:
        """The task of an episode started without one (from Gymnasium or OpenEnv)."""
        return {}


class SeatEnv(Env):
    """An env of several seats (players or roles) taking turns: one episode, one trajectory per
    seat the policy plays.

    `seats` names them (e.g. `("player_0", "player_1")`); the run's `env.seats` says who plays
    each (`forge_agent.rollout.players`). One episode:

        start = await env.reset(task, seed)   # SeatStart: each seat's messages + tools, start.turn
        step = await env.step(message)        # the move of the seat whose turn it is -> SeatStep:
                                              # new messages per seat, next turn, rewards per seat
        ...                                   # until step.done
        await env.close()

    Every seat sees only its own messages and keeps its own token history (append-only, with
    the same bridge and segment rules as a one-seat episode). Rewards are per seat
    (`SeatStep.rewards[seat]`); `zero_sum = True` states that the seats' rewards of a finished
    episode sum to 0 (the rollout engine checks it and marks `info["zero_sum_error"]`). An env
    that gives the turn to a seat it did not declare ends the episode `env_error`.
    A plain `Env` is the case of one seat and runs exactly as before.
    """

    seats: ClassVar[tuple[str, ...]] = ()
    zero_sum: ClassVar[bool] = False

    async def reset(  # type: ignore[override]
        self, task: dict[str, Any], seed: int | None = None
    ) -> SeatStart:
        raise NotImplementedError(f"{type(self).__name__} must implement reset(task, seed)")

    async def step(self, assistant_message: Message) -> SeatStep:  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__} must implement step(assistant_message)")


def env_seats(env_class: type) -> tuple[str, ...]:
    """The seats an env class declares (`SeatEnv.seats`); () for a one-seat env."""
    return tuple(getattr(env_class, "seats", ()) or ())


class ToolEnv(Env):
    """An env whose model calls tools, then answers in a message without tool calls.

    Subclasses set `tools` (plain typed functions), optionally `system_prompt`, and write
    `judge(answer)`: the rewards of a final answer, as `{"name": value}` or as
    `(rewards, info)`. An assistant message with tool calls gets one tool message per call;
    one without tool calls is the final answer and ends the episode.

    For tools that run code, override `make_sandbox()`; the sandbox is made at each reset
    (one per episode), injected into tools that take a keyword-only `sandbox`, and closed at
    the next reset or at close.
    """

    tools: ClassVar[Sequence[Callable[..., Any]]] = ()
    system_prompt: ClassVar[str | None] = None
    required_fields: ClassVar[tuple[str, ...]] = ("prompt",)  # read by `prompt`
    tool_timeout_s: ClassVar[float] = 20.0  # below env.step_timeout_s (30 s by default)
    max_tool_output_chars: ClassVar[int] = 4_000

    task: dict[str, Any]
    seed: int | None
    toolset: ToolSet
    sandbox: Any = None

    def get_tools(self) -> list[Callable[..., Any]]:
        """The tools of this episode (default: the class's `tools`)."""
        return list(self.tools)

    def make_sandbox(self) -> Any:
        """A sandbox for this episode, or None when the tools need none. May be async."""
        return None

    def prompt(self, task: dict[str, Any]) -> list[Message]:
        """The episode's opening messages: the system prompt, then `task["prompt"]`."""
        messages: list[Message] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": task["prompt"]})
        return messages

    def judge(self, answer: str) -> Any:
        """Rewards of the final answer: `{"name": value}` or `(rewards, info)`. May be async."""
        raise NotImplementedError(f"{type(self).__name__} must implement judge(answer)")

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        await self._close_sandbox()
        self.task, self.seed = task, seed
        self.sandbox = await maybe_await(self.make_sandbox())
        self.toolset = self.new_toolset()
        return self.prompt(task), self.toolset.specs

    def new_toolset(self) -> ToolSet:
        """This episode's `ToolSet`: `get_tools()` over the episode's sandbox, with the env's
        tool timeout and output cap."""
        return ToolSet(
            self.get_tools(),
            sandbox=self.sandbox,
            timeout_s=self.tool_timeout_s,
            max_output_chars=self.max_tool_output_chars,
        )

    async def step(self, assistant_message: Message) -> StepResult:
        if not hasattr(self, "toolset"):
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")
        tool_calls = assistant_message.get("tool_calls") or []
        if tool_calls:
            errors_before = self.toolset.num_errors
            messages = await self.toolset.call_all(tool_calls)
            info = {
                "tool_calls": len(messages),
                "tool_errors": self.toolset.num_errors - errors_before,
            }
            result = StepResult(messages=messages, info=info)
        else:
            verdict = await maybe_await(self.judge(message_text(assistant_message)))
            rewards, info = verdict if isinstance(verdict, tuple) else (verdict, {})
            if isinstance(rewards, (int, float)):
                rewards = {"reward": float(rewards)}
            result = StepResult(
                messages=[],
                rewards={k: float(v) for k, v in rewards.items()},
                done=True,
                info=dict(info),
            )
        state_key = getattr(self, "state_key", None)
        if callable(state_key):
            result.info["state_key"] = str(state_key())
        return result

    async def close(self) -> None:
        await self._close_sandbox()

    async def _close_sandbox(self) -> None:
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None and hasattr(sandbox, "close"):
            await maybe_await(sandbox.close())


# ---------------------------------------------------------------------- an episode's env
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

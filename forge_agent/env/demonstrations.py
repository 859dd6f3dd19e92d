"""An env's demonstrations: its optional `demonstrations()` hook, read as conversations paired
with the tool specs they were written against, and the pieces of the call format's scripted
demonstrations for an env without one (`sampled_call`, `final_answer`; played through the
episode loop by `forge_agent.warm_start.schema_demos`). The warm start reads them; the
tokenizer corpus is `forge_agent.env.corpus`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import random
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from forge_agent.env.protocol import maybe_await
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.toolkit.toolset import ToolSet
from forge_agent.types import Message, ToolSpec

if TYPE_CHECKING:
    from forge_agent.env.protocol import EpisodeEnv

__all__ = [
    "Conversation",
    "Demonstration",
    "as_conversation",
    "as_demonstration",
    "demonstrations_of",
    "demonstrations_origin",
    "env_demonstration_items",
    "env_demonstrations",
    "final_answer",
    "run_sync",
    "sampled_call",
    "tool_specs_of",
]

T = TypeVar("T")

Conversation = tuple[list[Message], list[ToolSpec]]
"""A chat conversation and the tool specs its system prompt shows."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion from sync code, also when an event loop is running here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def tool_specs_of(env: EpisodeEnv) -> list[ToolSpec]:
    """The tool schemas of `env`'s demonstrations: its `get_tools()`, or, for tools built from
    the episode's task (`get_tools` reads `self.task`, which no task has set yet), the tools a
    reset on the env's `default_task(0)` offers."""
    get_tools = getattr(env, "get_tools", None)
    if not callable(get_tools):
        return []
    try:
        return ToolSet(get_tools()).specs
    except AttributeError as exc:  # `self.task` (or what reset sets) is not there yet
        default_task = getattr(env, "default_task", None)
        if not callable(default_task):
            raise
        try:
            _, tools = run_sync(_reset_and_close(env, default_task(0)))
        except Exception:
            raise exc from None
        return list(tools)


async def _reset_and_close(env: Any, task: dict[str, Any]) -> Any:
    try:
        return await maybe_await(env.reset(task, 0))
    finally:
        await maybe_await(env.close())


Demonstration = tuple[Conversation, dict[str, Any] | None]
"""A conversation and the task it was played on (None: the hook did not say; see
`env_demonstrations`)."""


def as_conversation(item: object, specs: Callable[[], list[ToolSpec]]) -> Conversation | str:
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        tools = item.get("tools")
        return list(item["messages"]), list(tools) if tools is not None else specs()
    if isinstance(item, tuple):
        messages, tools = item
        return list(messages), list(tools)
    return list(item), specs()


def as_demonstration(item: object, specs: Callable[[], list[ToolSpec]]) -> Demonstration | str:
    """One item of a `demonstrations()` hook: a conversation, and its task when it gives one
    (`{"messages": ..., "task": ...}`)."""
    convo = as_conversation(item, specs)
    if isinstance(convo, str):
        return convo
    task = item.get("task") if isinstance(item, dict) else None
    return convo, dict(task) if task is not None else None


def env_demonstration_items(
    env: EpisodeEnv, n: int, seed: int, demo_fraction: float, max_turns: int | None = None
) -> list[Demonstration] | None:
    """`n` demonstrations of the env instance `env`, each with the task it was played on when
    the hook gives it (None when the env has no `demonstrations`; see `env_demonstrations`)."""
    hook = getattr(env, "demonstrations", None)
    if not callable(hook):
        return None
    specs = functools.cache(lambda: tool_specs_of(env))  # one lookup for every demonstration
    extra = {"max_turns": max_turns} if max_turns is not None and _takes_max_turns(hook) else {}
    items = [as_demonstration(item, specs) for item in hook(n, seed, demo_fraction, **extra)]
    return [d for d in items if not isinstance(d, str)]


def env_demonstrations(
    env: EpisodeEnv, n: int, seed: int, demo_fraction: float, max_turns: int | None = None
) -> list[Conversation] | None:
    """`n` demonstrations of the env instance `env` (None when it has no `demonstrations`).

    A hook gives each demonstration as its messages (the tools: the env's `get_tools()`), as
    `(messages, tools)`, or as a dict `{"messages": ..., "tools": ... (optional), "task": ...
    (optional)}`: the task a demonstration was played on lets `--check` replay it through the
    env (reset on that task, each call stepped) and compare the env's replies with its own.
    `max_turns`: passed on to a hook that takes it (`demonstrations(n, seed, demo_fraction,
    max_turns=None)`: it may stop a conversation after that many assistant turns, the first
    turns of the whole one; a Gymnasium game's), else the conversations are whole."""
    items = env_demonstration_items(env, n, seed, demo_fraction, max_turns)
    return None if items is None else [convo for convo, _ in items]


def _takes_max_turns(hook: Callable[..., Any]) -> bool:
    import inspect

    try:
        return "max_turns" in inspect.signature(hook).parameters
    except (TypeError, ValueError):  # a builtin or a C callable: no signature
        return False


def demonstrations_of(
    env: ResolvedEnv, n: int, seed: int, demo_fraction: float, max_turns: int | None = None
) -> list[Conversation] | None:
    """`n` demonstrations of `env` (None when the env has no `demonstrations`; `max_turns`:
    see `env_demonstrations`)."""
    return env_demonstrations(env.make(), n, seed, demo_fraction, max_turns)


def demonstrations_origin(env: ResolvedEnv) -> ResolvedEnv:
    """The env whose demonstrations `env` gives: its optional `demonstrations_origin()` hook's
    answer (an OpenEnv URL: the env its server serves; an agent program: its `tasks_from`
    env), resolved here where the hook names it, else `env` itself. The warm start keys its
    cache by it, so a URL with a random port still finds a cached warm start."""
    if not callable(getattr(env.factory(), "demonstrations_origin", None)):
        return env  # most envs: no instance needed
    origin = env.make().demonstrations_origin()
    if origin is None:
        return env
    origin_id, origin_kwargs = origin
    return ResolvedEnv.of(str(origin_id), kwargs=dict(origin_kwargs or {}))


# ---------------------------------------------------------------------------- schema demos
SCHEMA_DEMO_MAX_CALLS = 3
"""Tool calls per schema demonstration, at most (1 to this many, then a final answer)."""


def sampled_call(tool: ToolSpec, convo: list[Message], rng: random.Random, call_id: str) -> dict:
    """A well-formed call of `tool` with arguments sampled from its JSON schema: an enum
    value, a small number, a boolean, or one to three words of `convo`'s messages for a
    string; every required argument, each optional one with chance 0.3. `rng` is a
    `random.Random`; `call_id` the call's id."""
    import json

    fn = tool["function"]
    schema = fn.get("parameters") or {}
    props = schema.get("properties") or {}
    required = set(schema.get("required") or props)
    words = [w.strip(".,?!:;\"'()") for m in convo for w in str(m.get("content") or "").split()]
    words = [w for w in words if w] or ["x"]
    args = {
        name: _sample_value(spec, words, rng)
        for name, spec in props.items()
        if name in required or rng.random() < 0.3
    }
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": fn["name"], "arguments": json.dumps(args)},
    }


def _sample_value(spec: dict[str, Any], words: list[str], rng: Any) -> Any:
    if spec.get("enum"):
        return rng.choice(spec["enum"])
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return rng.randint(0, 20)
    if kind == "number":
        return round(rng.uniform(0, 20), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_sample_value(spec.get("items") or {}, words, rng)]
    if kind == "object":
        return {}
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))


def final_answer(convo: list[Message], rng: random.Random) -> str:
    """A short answer: a word of the last tool output (the call format is what is taught)."""
    last = next((m for m in reversed(convo) if m.get("role") == "tool"), None)
    words = str((last or {}).get("content") or "done").split()
    return rng.choice(words[:20]) if words else "done"

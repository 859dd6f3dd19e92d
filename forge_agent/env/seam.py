"""Reading an env's optional demonstrations and corpus (the seam beside reset/step/close).

The warm start (`forge_agent.warm_start`) and the tiny tokenizer (`forge_agent.models.tiny`)
ask an env, by id, for conversations; these helpers make the env, call its hook and pair each
conversation with the tool specs it was written against.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from forge_agent.env.registry import env_spec
from forge_agent.toolset import ToolSet
from forge_agent.types import Message, ToolSpec

__all__ = ["Conversation", "corpus_of", "demonstrations_of", "run_sync"]

T = TypeVar("T")

Conversation = tuple[list[Message], list[ToolSpec]]
"""A chat conversation and the tool specs its system prompt shows."""

CORPUS_TASKS = 32
"""Tasks whose reset messages make the corpus of an env without a `corpus()`."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion from sync code, also when an event loop is running here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _tool_specs(env: Any) -> list[ToolSpec]:
    get_tools = getattr(env, "get_tools", None)
    return ToolSet(get_tools()).specs if callable(get_tools) else []


def _pair(env: Any, item: Any) -> Conversation | str:
    if isinstance(item, str):
        return item
    if isinstance(item, tuple):
        messages, tools = item
        return list(messages), list(tools)
    return list(item), _tool_specs(env)


def demonstrations_of(
    env_id: str, env_kwargs: Mapping[str, Any], n: int, seed: int, demo_fraction: float
) -> list[Conversation] | None:
    """`n` demonstrations of `env_id` (None when the env has no `demonstrations`)."""
    env = env_spec(env_id).make(**dict(env_kwargs))
    hook = getattr(env, "demonstrations", None)
    if not callable(hook):
        return None
    convos = [_pair(env, item) for item in hook(n, seed, demo_fraction)]
    return [c for c in convos if not isinstance(c, str)]


def corpus_of(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> list[str | Conversation]:
    """Tokenizer text of `env_id`: its `corpus()` (strings and conversations), else the
    rendered reset messages and tool specs of its first training tasks."""
    env = env_spec(env_id).make(**dict(env_kwargs or {}))
    hook = getattr(env, "corpus", None)
    if callable(hook):
        return [_pair(env, item) for item in hook()]
    from forge_agent.env.tasks import load_tasks

    tasks = load_tasks(env_id, "train", CORPUS_TASKS, seed=0, env_kwargs=env_kwargs)

    async def resets() -> list[Conversation]:
        out = []
        try:
            for i, task in enumerate(tasks):
                messages, tools = await env.reset(task, i)
                out.append((list(messages), list(tools)))
        finally:
            await env.close()
        return out

    return list(run_sync(resets()))

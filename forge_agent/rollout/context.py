"""Context management: what an episode's prompt keeps once its transcript outgrows the context.

`rollout.context.strategy` picks one:

    keep               every message stays; an episode ends `truncated_length` at the budget
    drop_tool_outputs  the oldest tool outputs are replaced by a short note until the prompt
                       fits `budget` tokens (the newest `keep_last` always stay)
    "pkg.module:fn"    a user's function: fn(messages, tools, budget, count_tokens) -> messages
                       (sync or async); e.g. one that summarises earlier turns

A strategy runs before a turn whose prompt is over `budget` (default: the segment's token
budget less one turn's `max_new_tokens_per_turn`). Its messages are rendered in full and
start a new segment of the token history (`forge_agent.rollout.history`): the policy samples
on exactly that prompt, the trainer trains each segment on exactly the tokens it saw, and all
segments share the episode's reward. The transcript (`Trajectory.messages`) keeps every
message; the rewritten view is what the policy saw.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from forge_agent.types import Message, ToolSpec

CountTokens = Callable[[list[Message]], int]
Compactor = Callable[
    [list[Message], list[ToolSpec], int, CountTokens], "list[Message] | Awaitable[list[Message]]"
]
"""A context strategy: (messages the policy sees, its tools, token budget, a counter of a
message list's prompt tokens) -> the messages it will see instead."""

DROPPED = "[output dropped]"


def drop_tool_outputs(
    messages: list[Message],
    budget: int,
    count: CountTokens,
    keep_last: int = 1,
    roles: tuple[str, ...] = ("tool",),
) -> list[Message]:
    """`messages` with the oldest outputs of `roles` replaced by `DROPPED`, oldest first,
    until `count(messages) <= budget`; the task (every message before the first assistant
    turn) and the newest `keep_last` stay whole. The result may still be over the budget when
    nothing more can be dropped."""
    out = [dict(m) for m in messages]
    first = next((i for i, m in enumerate(out) if m.get("role") == "assistant"), len(out))
    droppable = [
        i
        for i, m in enumerate(out)
        if i > first and m.get("role") in roles and m.get("content") != DROPPED
    ]
    if keep_last:
        droppable = droppable[:-keep_last]
    for i in droppable:
        if count(out) <= budget:
            break
        out[i]["content"] = DROPPED
    return out


async def compact(
    compactor: Compactor,
    messages: list[Message],
    tools: list[ToolSpec],
    budget: int,
    count: CountTokens,
) -> list[Message]:
    """Run a strategy (sync or async) and check what it returns."""
    out: Any = compactor(list(messages), list(tools), budget, count)
    if inspect.isawaitable(out):
        out = await out
    if not isinstance(out, list) or not all(isinstance(m, dict) and "role" in m for m in out):
        raise TypeError(
            f"rollout.context.strategy returned {type(out).__name__}, not a list of messages"
        )
    return out

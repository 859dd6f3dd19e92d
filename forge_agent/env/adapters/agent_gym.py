"""An agent env as a `gymnasium.Env` (`AgentGymEnv`), with `Text` observation and action spaces.

`register_gymnasium_envs()` (an explicit call: importing this module registers nothing)
registers every agent env id as `gymnasium.make("forge_agent/<Name>-v0")`, e.g.
"forge_agent/Calculator-v0". Text actions are assistant messages; tool calls are written
Hermes-style: `<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 2"}}</tool_call>`.
The other way round (a Gymnasium game as an agent env) is `forge_agent.env.adapters.gymnasium`.
"""

from __future__ import annotations

import asyncio
import json
import re
import string
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, ClassVar

import gymnasium

from forge_agent.env.protocol import AgentEnv
from forge_agent.env.registry import make_env, registered_env_ids
from forge_agent.types import Message, StepResult, ToolSpec

__all__ = [
    "AgentGymEnv",
    "gymnasium_id",
    "parse_text_action",
    "register_gymnasium_envs",
    "render_messages",
]


TEXT_CHARSET = frozenset(string.printable)
"""Characters of the Text spaces; other characters in observations are shown as "?"."""

MAX_TEXT_CHARS = 200_000

_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def render_messages(messages: list[Message], tools: list[ToolSpec] | None = None) -> str:
    """Messages (and tool schemas) as plain text, one `[role]` block each."""
    blocks = []
    if tools:
        blocks.append("[tools]\n" + "\n".join(json.dumps(t["function"]) for t in tools))
    for message in messages:
        text = message.get("content") or ""
        if not isinstance(text, str):
            text = json.dumps(text)
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            text += f'\n<tool_call>{{"name": {json.dumps(fn.get("name"))}, "arguments": '
            text += f"{json.dumps(fn.get('arguments'))}}}</tool_call>"
        blocks.append(f"[{message.get('role', '?')}]\n{text}")
    return "\n".join(blocks)


def parse_text_action(text: str) -> Message:
    """An assistant message from text; `<tool_call>{"name", "arguments"}</tool_call>` blocks
    become tool calls (a block that is not JSON becomes a call the ToolSet reports)."""
    tool_calls = []
    for i, raw in enumerate(_TOOL_CALL_RE.findall(text)):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = {"name": "", "arguments": raw}
        if not isinstance(data, dict):
            data = {"name": "", "arguments": raw}
        tool_calls.append(
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": data.get("name"), "arguments": data.get("arguments", {})},
            }
        )
    message: Message = {"role": "assistant", "content": _TOOL_CALL_RE.sub("", text).strip()}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


class AgentGymEnv(gymnasium.Env):
    """An agent env as a `gymnasium.Env` with `Text` observation and action spaces.

    `reset(seed=, options={"task": task})` starts an episode (without a task, the agent env's
    `default_task(seed)` is used); the observation is the new messages as text, `info` holds
    them as dicts (`info["messages"]`, and `info["tools"]` at reset). `step(text)` parses the
    text as an assistant message (see `parse_text_action`); the reward is the sum of the reward
    components (each in `info["rewards"]`).

    Args:
        env: an agent env instance, or a registered env id to make.
        env_kwargs: constructor arguments when `env` is an id.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, env: AgentEnv | str, env_kwargs: dict[str, Any] | None = None) -> None:
        self.agent_env: AgentEnv = (
            make_env(env, **(env_kwargs or {})) if isinstance(env, str) else env
        )
        self.observation_space = gymnasium.spaces.Text(
            MAX_TEXT_CHARS, min_length=0, charset=TEXT_CHARSET
        )
        self.action_space = gymnasium.spaces.Text(
            MAX_TEXT_CHARS, min_length=0, charset=TEXT_CHARSET
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task = (options or {}).get("task")
        episode_seed = int(self.np_random.integers(2**31 - 1))
        if task is None:
            task = self.agent_env.default_task(episode_seed)  # type: ignore[attr-defined]
        messages, tools = self._run(self.agent_env.reset(task, episode_seed))
        info = {"messages": messages, "tools": tools, "task": task}
        return self._text(render_messages(messages, tools)), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        message = parse_text_action(action)
        result: StepResult = self._run(self.agent_env.step(message))
        info = {"messages": result.messages, "rewards": dict(result.rewards), **result.info}
        reward = float(sum(result.rewards.values()))
        return self._text(render_messages(result.messages)), reward, result.done, False, info

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.agent_env.close())
        finally:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                assert self._thread is not None
                self._thread.join(timeout=5)
                self._loop.close()
                self._loop = None

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        # The agent env's coroutines run on a private loop in a private thread, so this works
        # whether or not the caller's thread already runs an event loop.
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name=f"agent-gym-{uuid.uuid4().hex[:6]}", daemon=True
            )
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @staticmethod
    def _text(text: str) -> str:
        text = "".join(c if c in TEXT_CHARSET else "?" for c in text)
        return text[:MAX_TEXT_CHARS]


def gymnasium_id(env_id: str) -> str:
    """ "frozen_lake" -> "forge_agent/FrozenLake-v0"."""
    name = "".join(part.capitalize() for part in re.split(r"[_\-\s]+", env_id) if part)
    return f"forge_agent/{name}-v0"


def register_gymnasium_envs(max_episode_steps: int = 32) -> list[str]:
    """Register every agent env id with Gymnasium (idempotent); return the Gymnasium ids."""
    ids = []
    for env_id in registered_env_ids():
        gym_id = gymnasium_id(env_id)
        if gym_id not in gymnasium.registry:
            gymnasium.register(
                id=gym_id,
                entry_point="forge_agent.env.adapters.agent_gym:AgentGymEnv",
                kwargs={"env": env_id},
                max_episode_steps=max_episode_steps,
                disable_env_checker=True,
            )
        ids.append(gym_id)
    return ids

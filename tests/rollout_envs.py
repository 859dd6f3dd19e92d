"""Small envs for rollout tests; importable by env worker processes (`tests.rollout_envs:X`)."""

from __future__ import annotations

import os
import time
from typing import Any

from forge_agent.env import Env
from forge_agent.types import Message, StepResult, ToolSpec


class EchoToolEnv(Env):
    """Never ends by itself: every assistant message gets a user message back."""

    def reset(self, task: dict[str, Any], seed: int | None = None):
        messages: list[Message] = [{"role": "user", "content": task.get("prompt", "hi")}]
        tools: list[ToolSpec] = []
        return messages, tools

    def step(self, assistant_message: Message) -> StepResult:
        return StepResult(messages=[{"role": "user", "content": "Go on."}])


class CrashingEnv(EchoToolEnv):
    """Its worker process dies in the first step."""

    def step(self, assistant_message: Message) -> StepResult:
        os._exit(3)


class HangingEnv(EchoToolEnv):
    """The first step never returns."""

    def step(self, assistant_message: Message) -> StepResult:
        time.sleep(3600)
        raise AssertionError("unreachable")

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


class LongOutputEnv(Env):
    """A long-horizon calculator: the calculator's prompt and tool, but every move (a call or
    an answer) is answered with a long tool output (`task["output_words"]` words) until the
    policy has made `task["steps"]` moves; its transcript outgrows the context."""

    async def reset(self, task: dict[str, Any], seed: int | None = None):
        from envs.calculator import CalculatorEnv

        self.moves, self.steps = 0, int(task.get("steps", 6))
        self.words = int(task.get("output_words", 60))
        calculator = CalculatorEnv()
        try:
            return await calculator.reset(task, seed)
        finally:
            await calculator.close()

    def step(self, assistant_message: Message) -> StepResult:
        self.moves += 1
        if self.moves >= self.steps:
            return StepResult(messages=[], rewards={"done": 1.0}, done=True)
        calls = assistant_message.get("tool_calls") or [{"id": "call"}]
        text = " ".join(f"result{self.moves}-{i}" for i in range(self.words))
        return StepResult(
            messages=[{"role": "tool", "content": text, "tool_call_id": calls[0]["id"]}]
        )


class ServerDownEnv(EchoToolEnv):
    """A game whose server is down at the first move (infra); a lost game scores -1."""

    failure_reward = -1.0

    def step(self, assistant_message: Message) -> StepResult:
        from forge_agent.errors import InfraError

        raise InfraError("the game server is down")

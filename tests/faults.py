"""Fault injection for controller tests: an env whose worker dies, whose tool hangs and whose
sandbox dies, an env whose task server goes down for good mid-run, a reward function that
raises, and a generator that errors.

The worker's death is keyed on the task's text, chosen to hit among the first training tasks
of seed 0 (the second task's worker dies). The hanging tool and the dying sandbox are keyed on
the model's expression and on the worker's own count of tool calls, so every run hits them
whatever the model writes.
"""

from __future__ import annotations

import os
import signal
import time
import zlib
from typing import Any

from envs.calculator import CalculatorEnv
from forge_agent.errors import InfraError
from forge_agent.sandbox import SandboxSession, make_sandbox
from forge_agent.types import Message, StepResult, Trajectory
from tools.calculator import calculator as exact_calculator


def _bucket(text: str, n: int) -> int:
    return zlib.crc32(text.encode()) % n


_CALLS = 0  # tool calls made in this env worker process


def calculator(expression: str, *, sandbox: SandboxSession) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: The arithmetic expression to evaluate.
    """
    global _CALLS
    _CALLS += 1
    kind = _bucket(expression, 4)
    # keyed on the model's expression, and on this worker's call count so that every run hits
    # both faults whatever the model writes (each worker makes several calls)
    if kind == 3 or _CALLS % 6 == 3:  # a tool that hangs (the ToolSet's timeout answers)
        time.sleep(30)
    if (kind == 1 or _CALLS % 6 == 1) and sandbox.pid is not None:  # the sandbox dies
        os.kill(sandbox.pid, signal.SIGKILL)
    result = sandbox.run(argv=["/bin/true"])
    if not result.ok:
        raise RuntimeError(f"sandbox failed: {result.stderr.strip()[:200]}")
    return exact_calculator(expression)


class FaultyCalculatorEnv(CalculatorEnv):
    """The calculator env with faults; its worker process dies on some tasks."""

    tools = (calculator,)
    tool_timeout_s = 1.0

    def make_sandbox(self) -> Any:
        return make_sandbox("bwrap").session()

    async def step(self, assistant_message: Message) -> StepResult:
        if _bucket(self.task["prompt"], 5) == 3:  # the env worker is killed mid-episode
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().step(assistant_message)


class TaskServerDownEnv(CalculatorEnv):
    """The calculator env fetching its episodes from a task server that goes down for good
    after `fail_after` resets, counted across every env worker (one byte appended to `ledger`
    per reset: a replaced worker keeps the count). Every later reset raises `InfraError`."""

    def __init__(self, ledger: str, fail_after: int, difficulty: int = 1) -> None:
        super().__init__(difficulty)
        self.ledger, self.fail_after = ledger, fail_after

    async def reset(self, task: dict[str, Any], seed: int | None = None) -> Any:
        fd = os.open(self.ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b".")
        finally:
            os.close(fd)
        if os.path.getsize(self.ledger) > self.fail_after:
            raise InfraError("task server at 127.0.0.1:9 refused the connection")
        return await super().reset(task, seed)


def flaky_reward(traj: Trajectory) -> float:
    """A user reward function that fails on some trajectories as infra (`InfraError`: its judge
    is down, which the policy cannot cause; any other exception would be the policy's failure,
    docs/rewards.md). Otherwise its value is keyed on
    the trajectory's length, so a group's survivors almost always differ: with half the tool
    calls failing, the answers are almost all wrong, and a reward that only scored them left
    most groups without signal (a CI run dropped 50 in a row and stopped)."""
    key = traj.group_id + str(len(traj.token_ids))
    if _bucket(key, 5) == 0:
        raise InfraError("flaky reward function failed")
    return (len(traj.token_ids) % 7) / 7


class FlakyGenerate:
    """Wraps a generate function; every `every`-th request fails."""

    def __init__(self, generate: Any, every: int = 9) -> None:
        self.generate, self.every, self.calls = generate, every, 0

    async def __call__(self, ids, sampling, session):
        self.calls += 1
        if self.calls % self.every == 0:
            raise RuntimeError("injected generator failure")
        return await self.generate(ids, sampling, session)


class BackendGoneEnv(CalculatorEnv):
    """The calculator env whose booking backend goes away for good after `fail_after` steps,
    counted across every env worker (one byte appended to `ledger` per step): every later step
    raises a plain `RuntimeError`, which the rule of blame makes the policy's (`policy_error`,
    scored with the failure reward, so every group's rewards are equal). What a user's env
    looks like when its author did not raise `InfraError` for a failure the policy cannot
    cause. Until then its reward is keyed on the answer's length, so that groups differ and
    steps train (the untrained policy's calculator groups are mostly all wrong)."""

    def __init__(self, ledger: str, fail_after: int, difficulty: int = 1) -> None:
        super().__init__(difficulty)
        self.ledger, self.fail_after = ledger, fail_after

    async def step(self, assistant_message: Message) -> StepResult:
        fd = os.open(self.ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b".")
        finally:
            os.close(fd)
        if os.path.getsize(self.ledger) > self.fail_after:
            raise RuntimeError("booking backend went away")
        return await super().step(assistant_message)

    def judge(self, answer: str) -> Any:
        _, info = super().judge(answer)
        return {"varied": (len(answer) % 7) / 7}, info

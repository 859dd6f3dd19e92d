"""The code_exec env: write a Python function; run code in a sandbox; hidden tests give the reward.

The model may call the `python` tool (code runs in this episode's sandbox session). Its final
message (no tool calls) must hold the solution in a fenced code block (```python ... ```; the
last block counts). The solution is then graded in a FRESH sandbox against hidden tests that
compare return values (see `grading.py`), so nothing the model did during the episode affects
the grade. Rewards: `{"tests_passed": fraction}`; info: `outcome` ("passed" | "partial" |
"failed" | "no_code" | "error"), `passed`, `total`, `used_tool`, `failures`.

Tasks come through `datasets`: by default the shipped `data/tasks.jsonl`; `dataset=` names a
hub dataset or a local json/jsonl file of the same shape: `task_id`, `entry_point`, `prompt`,
`tests` (a JSON string, or list, of `{"args": [...], "expected": value}`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from typing import Any

from envs.code_exec.grading import extract_code, grade
from forge_agent.env import ToolEnv
from forge_agent.sandbox import Limits, make_sandbox
from tools.python import python

__all__ = ["DEFAULT_DATA", "CodeExecEnv", "load_tasks"]

DEFAULT_DATA = os.path.join(os.path.dirname(__file__), "data", "tasks.jsonl")

SYSTEM_PROMPT = (
    "Write the requested Python function. You can run code with the python tool to check it. "
    "When you are done, reply with the complete function in one ```python code block."
)


@functools.lru_cache(maxsize=8)
def _load(dataset: str, split: str) -> tuple[dict[str, Any], ...]:
    import datasets  # slow to import: only when tasks are needed

    if os.path.exists(dataset):
        rows = datasets.load_dataset("json", data_files=dataset, split=split)
    else:
        rows = datasets.load_dataset(dataset, split=split)
    tasks = []
    for row in rows:
        task = dict(row)
        if isinstance(task["tests"], str):
            task["tests"] = json.loads(task["tests"])
        tasks.append(task)
    return tuple(tasks)


def load_tasks(dataset: str | None = None, split: str = "train") -> list[dict[str, Any]]:
    """The tasks of `dataset` (default: the shipped `data/tasks.jsonl`), tests decoded."""
    return [dict(t) for t in _load(dataset or DEFAULT_DATA, split)]


class CodeExecEnv(ToolEnv):
    """Programming tasks with a sandboxed `python` tool and hidden-test rewards.

    Args:
        dataset: hub dataset name or local json/jsonl path (default: the shipped tasks).
        split: dataset split.
        sandbox_backend: "bwrap" (default) or "docker".
        tool_limits: limits of each `python` tool run.
        test_limits: limits of the hidden-test run.
    """

    tools = (python,)
    system_prompt = SYSTEM_PROMPT
    tool_timeout_s = 30.0

    def __init__(
        self,
        dataset: str | None = None,
        split: str = "train",
        sandbox_backend: str = "bwrap",
        tool_limits: Limits | None = None,
        test_limits: Limits | None = None,
    ) -> None:
        self.dataset, self.split = dataset, split
        self.backend = make_sandbox(sandbox_backend)
        self.tool_limits = tool_limits or Limits(wall_s=10, cpu_s=10, memory_mb=512)
        self.test_limits = test_limits or Limits(wall_s=20, cpu_s=20, memory_mb=512)

    def default_task(self, seed: int) -> dict[str, Any]:
        tasks = load_tasks(self.dataset, self.split)
        return tasks[seed % len(tasks)]

    def make_sandbox(self) -> Any:
        return self.backend.session(self.tool_limits)

    async def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        task = self.task
        tests = task["tests"] if not isinstance(task["tests"], str) else json.loads(task["tests"])
        info: dict[str, Any] = {"used_tool": self.toolset.call_counts["python"] > 0}
        code = extract_code(answer, task["entry_point"])
        if code is None:
            info.update(outcome="no_code", passed=0, total=len(tests))
            return {"tests_passed": 0.0}, info
        result = await asyncio.to_thread(
            grade, code, task["entry_point"], tests, self.backend, self.test_limits
        )
        if result.error is not None:
            outcome = "error"
        elif result.passed == result.total:
            outcome = "passed"
        else:
            outcome = "partial" if result.passed else "failed"
        info.update(
            outcome=outcome,
            passed=result.passed,
            total=result.total,
            error=result.error,
            failures=result.failures[:5],
        )
        return {"tests_passed": result.fraction}, info

    async def close(self) -> None:
        await super().close()
        self.backend.close()

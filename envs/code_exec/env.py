"""The code_exec env: write a Python function; run code in a sandbox; hidden tests give the reward.

The model may call the `python` tool (code runs in this episode's sandbox session). Its final
message (no tool calls) must hold the solution in a fenced code block (```python ... ```; the
last block counts). The solution is then graded in a FRESH sandbox against hidden tests that
compare return values (see `grading.py`), so nothing the model did during the episode affects
the grade. Rewards: `{"tests_passed": fraction}`; info: `outcome` ("passed" | "partial" |
"failed" | "no_code" | "error"), `passed`, `total`, `used_tool`, `failures`.

Tasks come through `datasets`: by default the shipped `data/tasks.jsonl`; `dataset=` (or the
config's `env.dataset`) names a hub dataset or a local json/jsonl/parquet/csv file with:
`task_id`, `prompt`, `entry_point` (or a `reference` solution it can be read from), and either
`tests` (a JSON string, or list, of `{"args": [...], "expected": value}`) or `test_code`
(assertion code: HumanEval's `check(candidate)` definition, or MBPP's `assert` lines, as a
string or a list of lines). Other shapes map through `env.fields`, e.g. HumanEval's
`{test_code: test, reference: "{prompt}{canonical_solution}"}`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import random
import re
from typing import Any

from envs.code_exec.grading import extract_code, grade, task_helpers
from forge_agent.env import Dataset, EnvSetupError, ToolEnv
from forge_agent.sandbox import Limits, make_sandbox
from forge_agent.types import Message
from tools.python import python

__all__ = ["DEFAULT_DATA", "CodeExecEnv", "load_tasks", "normalize_task"]

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


_DEF = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


def normalize_task(task: dict[str, Any]) -> dict[str, Any]:
    """`task` with `tests` decoded, `test_code` lines joined, and `entry_point` read from the
    reference solution's last top-level `def` when the data has none (MBPP)."""
    task = dict(task)
    if isinstance(task.get("tests"), str):
        task["tests"] = json.loads(task["tests"])
    if isinstance(task.get("test_code"), list):
        task["test_code"] = "\n".join(task["test_code"])
    if not task.get("entry_point"):
        names = _DEF.findall(task.get("reference") or "")
        if not names:
            raise ValueError(f"task {task.get('task_id')!r} has no entry_point and no reference")
        task["entry_point"] = names[-1]
    return task


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
    tool_timeout_s = 15.0  # above a tool run's 10 s sandbox wall, which reports it first
    grader_timeout_s = 25.0  # the hidden-test run's 20 s sandbox wall and its start
    required_fields = ("task_id", "prompt", "entry_point|reference", "tests|test_code")

    def __init__(
        self,
        dataset: str | None = None,
        split: str = "train",
        sandbox_backend: str = "bwrap",
        tool_limits: Limits | None = None,
        test_limits: Limits | None = None,
    ) -> None:
        self.split = split
        # Single-split data is split by task id; the key keeps the shipped split stable.
        self.dataset = Dataset(dataset or DEFAULT_DATA, key=_split_key, split=split)
        self.backend = make_sandbox(sandbox_backend)
        self.tool_limits = tool_limits or Limits(wall_s=10, cpu_s=10, memory_mb=512)
        self.test_limits = test_limits or Limits(wall_s=20, cpu_s=20, memory_mb=512)

    def default_task(self, seed: int) -> dict[str, Any]:
        tasks = load_tasks(self.dataset.source, self.split)
        return tasks[seed % len(tasks)]

    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[list[Message]]:
        """Reference solutions of the shipped tasks; a `demo_fraction` share first runs the
        solution on the first test input with the python tool."""
        rng = random.Random(seed)
        tasks = load_tasks()
        return [
            _code_demo(self.prompt(task), task, rng.random() < demo_fraction)
            for task in (tasks[k % len(tasks)] for k in range(n))
        ]

    def corpus(self) -> list[list[Message]]:
        """The shipped tasks' prompts with their reference solutions."""
        return [[*self.prompt(task), _answer(task.get("reference", ""))] for task in load_tasks()]

    async def reset(self, task: dict[str, Any], seed: int | None = None) -> Any:
        task = normalize_task(task)
        self._oracle = await asyncio.to_thread(self.oracle, task)
        return await super().reset(task, seed)

    def oracle(self, task: dict[str, Any]) -> dict[str, Any]:
        """The task checked against its reference solution, once per process (as repo_tasks
        checks its oracle patch): the reference must pass its own tests, or the task is an
        `EnvSetupError` naming it (infra, never the policy's failure). For assertion tests it
        returns what grading needs from the reference: the task's helpers (`task_helpers`) and
        how many times each check fired (`expected`). A task without a reference is not
        checked: its checks' must-run rule is the test body's own top level."""
        key = hashlib.sha256(
            json.dumps(
                [task.get(k) for k in ("reference", "entry_point", "tests", "test_code")],
                default=str,
            ).encode()
        ).hexdigest()
        if key in _ORACLES:
            return _ORACLES[key]
        reference, test_code = task.get("reference"), task.get("test_code")
        found: dict[str, Any] = {"helpers": None, "expected": None}
        if test_code:
            found["helpers"] = task_helpers(reference, task["entry_point"], test_code)
        if reference:
            extra = {"test_code": test_code, "helpers": found["helpers"]} if test_code else {}
            result = grade(
                reference,
                task["entry_point"],
                task.get("tests") or [],
                self.backend,
                self.test_limits,
                **extra,
            )
            if result.error is not None or result.passed != result.total:
                why = result.error or "; ".join(result.failures[:3])
                raise EnvSetupError(
                    "code_exec",
                    str(task.get("task_id")),
                    f"its tests fail on its reference solution: {why}",
                )
            found["expected"] = result.fired
        _ORACLES[key] = found
        return found

    def make_sandbox(self) -> Any:
        return self.backend.session(self.tool_limits)

    async def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        task = self.task
        tests, test_code = task.get("tests") or [], task.get("test_code")
        info: dict[str, Any] = {"used_tool": self.toolset.call_counts["python"] > 0}
        code = extract_code(answer, task["entry_point"])
        if code is None:
            info.update(outcome="no_code", passed=0, total=1 if test_code else len(tests))
            return {"tests_passed": 0.0}, info
        oracle = getattr(self, "_oracle", None) or {}
        extra = (
            {"test_code": test_code, "helpers": oracle.get("helpers"),
             "expected": oracle.get("expected")}
            if test_code
            else {}
        )  # fmt: skip
        result = await asyncio.to_thread(
            functools.partial(grade, **extra),
            code,
            task["entry_point"],
            tests,
            self.backend,
            self.test_limits,
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
        if result.exposed:  # assertions whose expected value was in the solution's process
            info["exposed_checks"] = result.exposed
        return {"tests_passed": result.fraction}, info

    async def close(self) -> None:
        await super().close()
        self.backend.close()


_ORACLES: dict[str, dict[str, Any]] = {}


def _split_key(task: dict[str, Any]) -> str:
    return f"code_exec:{task['task_id']}"


def _answer(code: str) -> Message:
    return {"role": "assistant", "content": f"```python\n{code}```"}


def _code_demo(prompt: list[Message], task: dict[str, Any], use_tool: bool) -> list[Message]:
    answer = _answer(task["reference"])
    if not use_tool:
        return [*prompt, answer]
    tests = json.loads(task["tests"]) if isinstance(task["tests"], str) else task["tests"]
    first = tests[0]["args"] if tests else []
    check = f"{task['reference']}\nprint({task['entry_point']}(*{first!r}))"
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "python", "arguments": json.dumps({"code": check})},
    }
    printed = f"{tests[0]['expected']}\n" if tests else ""  # what print() of the answer writes
    # as the python tool replies (tools.python.format_run_result): --check replays it
    reply = f"stdout:\n{printed.rstrip(chr(10))}\nexit code 0" if printed else "exit code 0"
    result = {"role": "tool", "tool_call_id": "call_0", "name": "python", "content": reply}
    return [*prompt, {"role": "assistant", "content": "", "tool_calls": [call]}, result, answer]

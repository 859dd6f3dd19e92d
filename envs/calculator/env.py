"""The calculator env: arithmetic problems, a `calculator` tool, exact-answer reward.

Answer format (what `judge` accepts): the final assistant message (one without tool calls) is
the answer. It is correct when it is the bare integer (`"449"`; surrounding whitespace and one
trailing period allowed) or contains `\\boxed{449}` (the last box counts). Anything else is
wrong. Rewards: `{"correct": 1.0 or 0.0}`; info: `outcome` ("correct" | "wrong" |
"no_answer"), `used_tool`, `answer`, `expected`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from envs.calculator.tasks import generate_tasks
from forge_agent.env import ToolEnv
from forge_agent.types import Message
from tools.calculator import calculator

__all__ = ["CalculatorEnv", "demonstration", "extract_answer"]

SYSTEM_PROMPT = (
    "Solve the arithmetic problem. Call the calculator tool with the expression, then reply "
    "with only the final answer as an integer."
)

_BOXED = re.compile(r"\\boxed\{\s*(-?[\d,]+)\s*\}")
_BARE = re.compile(r"-?\d+")


def extract_answer(text: str) -> str | None:
    """The integer a final message gives as its answer, or None (see the module docstring)."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].replace(",", "")
    bare = text.strip().removesuffix(".").strip()
    return bare if _BARE.fullmatch(bare) else None


class CalculatorEnv(ToolEnv):
    """Arithmetic word problems; the model may use `calculator`, then answers an integer.

    Args:
        difficulty: difficulty of the tasks made by `default_task` (1, 2 or 3).
    """

    tools = (calculator,)
    system_prompt = SYSTEM_PROMPT
    tool_timeout_s = 5.0

    def __init__(self, difficulty: int = 1) -> None:
        self.difficulty = difficulty

    def default_task(self, seed: int) -> dict[str, Any]:
        return generate_tasks(1, seed=seed, difficulty=self.difficulty)[0]

    def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        given = extract_answer(answer)
        expected = str(self.task["answer"])
        if given is None:
            outcome = "no_answer"
        else:
            outcome = "correct" if int(given) == int(expected) else "wrong"
        info = {
            "outcome": outcome,
            "used_tool": self.toolset.call_counts["calculator"] > 0,
            "answer": given,
            "expected": expected,
        }
        return {"correct": float(outcome == "correct")}, info


def demonstration(task: dict[str, Any]) -> list[Message]:
    """A correct, tool-using conversation for `task` (for supervised warm starts).

    system, user, assistant calling `calculator`, the tool's result, assistant final answer.
    """
    result = calculator(task["expression"])
    assert result == str(task["answer"]), (task, result)
    call_id = "call_0"
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task["prompt"]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": "calculator",
                        "arguments": json.dumps({"expression": task["expression"]}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "name": "calculator", "content": result},
        {"role": "assistant", "content": str(task["answer"])},
    ]

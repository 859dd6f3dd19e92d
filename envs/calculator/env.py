"""The calculator env: arithmetic problems, a `calculator` tool, exact-answer reward.

Answer format (what `judge` accepts): the final assistant message (one without tool calls) is
the answer. It is correct when it is the bare integer (`"449"`; surrounding whitespace and one
trailing period allowed) or contains `\\boxed{449}` (the last box counts). Anything else is
wrong. Rewards: `{"correct": 1.0 or 0.0}`; info: `outcome` ("correct" | "wrong" |
"no_answer"), `used_tool`, `answer`, `expected`.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from typing import Any

from envs.calculator import families
from envs.calculator.tasks import DIFFICULTIES, generate_tasks
from forge_agent.env import Split, ToolEnv, holdout
from forge_agent.sandbox import make_sandbox
from forge_agent.types import Message
from tools.calculator import calculator, logging_calculator

__all__ = ["CalculatorEnv", "demonstration", "extract_answer"]

SYSTEM_PROMPT = (
    "Solve the arithmetic problem. Call the calculator tool with the expression, then reply "
    "with only the final answer as an integer."
)

NO_TOOL_PROMPT = "Solve the arithmetic problem. Reply with only the final answer as an integer."
"""The system prompt with `tool=False`: the same task, answered without a calculator."""

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
        tool_log_chars: > 0 makes the tool's reply an evaluation log of this many characters,
            then the result on its last line (`tools.calculator.logging_calculator`): long tool
            outputs at the same task, for the speed bench. 0: the bare result.
        tool: False offers no tool (and says so in the system prompt): the model alone on the
            same tasks, the reference line a tool-use result is read against.
        family: None (the difficulty's tasks), or a task family where copying the prompt is
            not enough (`envs.calculator.families`: "word_problems", "dependent", "mixed",
            "program"): its tasks, held out by template, its tools and system prompt, and
            correct demonstrations only. `difficulty` and `tool_log_chars` do not apply to a
            family. "program" runs the model's `python` calls in a bubblewrap sandbox, one
            session an episode.
    """

    tools = (calculator,)
    system_prompt = SYSTEM_PROMPT
    tool_timeout_s = 5.0
    required_fields = ("prompt", "answer")

    def __init__(
        self,
        difficulty: int = 1,
        tool_log_chars: int = 0,
        tool: bool = True,
        family: str | None = None,
    ) -> None:
        if difficulty not in DIFFICULTIES:  # refused when built, before any task is made
            raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
        if not isinstance(tool_log_chars, int) or tool_log_chars < 0:
            raise ValueError(f"tool_log_chars must be an int >= 0, got {tool_log_chars!r}")
        self.difficulty = int(difficulty)
        self.tool_log_chars = tool_log_chars
        if not isinstance(tool, bool):
            raise ValueError(f"tool must be true or false, got {tool!r}")
        self.tool = logging_calculator(tool_log_chars) if tool_log_chars else calculator
        self.offers_tool = tool
        if not tool:
            self.system_prompt = NO_TOOL_PROMPT
        if family is not None:
            if family not in families.FAMILIES:
                raise ValueError(f"family must be one of {families.FAMILIES}, got {family!r}")
            if tool_log_chars or not tool:
                raise ValueError("family does not take tool_log_chars or tool=false")
            self.system_prompt = families.system_prompt(family)
        self.family = family
        self._sandbox_backend: Any = None

    def get_tools(self) -> list[Any]:
        """The class's `tools` (a subclass may set its own), the logging calculator, or none
        (`tool=False`)."""
        if not self.offers_tool:
            return []
        if self.family is not None:
            return families.family_tools(self.family, lambda: self.task)
        return [self.tool] if self.tool_log_chars else super().get_tools()

    def make_sandbox(self) -> Any:
        """The episode's sandbox session: only the `program` family runs code."""
        if self.family != "program":
            return None
        if self._sandbox_backend is None:
            self._sandbox_backend = make_sandbox("bwrap")
        return families.make_sandbox(self.family, self._sandbox_backend)

    async def close(self) -> None:
        await super().close()
        backend, self._sandbox_backend = self._sandbox_backend, None
        if backend is not None:
            backend.close()

    def default_task(self, seed: int) -> dict[str, Any]:
        if self.family is not None:
            return families.generate_family_tasks(self.family, "train", 1, seed)[0]
        return generate_tasks(1, seed=seed, difficulty=self.difficulty)[0]

    def tasks(self, split: Split, n: int, seed: int) -> list[dict[str, Any]]:
        """The `split` share of `n` generated problems; the split follows the expression, so
        "37 * 12" (also as a word problem) is never both a training and an eval task. A
        family's split is by template: eval tasks are phrasings training never shows."""
        if self.family is not None:
            return families.generate_family_tasks(self.family, split, n, seed)
        generated = generate_tasks(n, seed=seed, difficulty=self.difficulty)
        return holdout(generated, split, key=problem_key)

    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[list[Message]]:
        """Tool-using solutions, and for a `1 - demo_fraction` share a direct guess instead
        (mostly wrong: RL has to find that calling the tool pays). A family's are all correct
        (`demo_fraction` does not apply): its training templates' solutions, and for a task
        that needs no tool the direct answer."""
        if self.family is not None:
            made = families.generate_family_tasks(self.family, "train", n, seed + 7919)
            with contextlib.ExitStack() as stack:  # one sandbox session for all (`program`)
                session = families.make_sandbox(self.family)
                if session is not None:
                    stack.enter_context(session)
                return [families.demonstration(task, session) for task in made]
        rng = random.Random(seed)
        convos = []
        for task in generate_tasks(n, seed=seed + 7919, difficulty=self.difficulty):
            demo = demonstration(task, self.tool)
            if rng.random() >= demo_fraction:  # a guess: answer without the tool
                demo = [*demo[:2], {"role": "assistant", "content": _guess(task["answer"], rng)}]
            convos.append(demo)
        return convos

    def corpus(self) -> list[list[Message]]:
        """Demonstrations at every difficulty, for the tiny model's tokenizer."""
        return [
            demonstration(task)
            for difficulty in (1, 2, 3)
            for task in generate_tasks(200, seed=12345, difficulty=difficulty)
        ]

    def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        given = extract_answer(answer)
        expected = str(self.task["answer"])
        if given is None:
            outcome = "no_answer"
        else:
            outcome = "correct" if int(given) == int(expected) else "wrong"
        calls = sum(self.toolset.call_counts.values())
        info = {
            "outcome": outcome,
            "used_tool": self.toolset.call_counts.get(
                "python" if self.family == "program" else "calculator", 0
            )
            > 0,
            "answer": given,
            "expected": expected,
        }
        reward = float(outcome == "correct")
        if self.family is not None:
            info["kind"] = self.task.get("kind")
            if calls and not self.task.get("needs_tool", True):
                info["needless_call"] = True  # right after a call the task did not need: half
                reward *= families.NEEDLESS_CALL_REWARD
        return {"correct": reward}, info


def problem_key(task: dict[str, Any]) -> str:
    """What makes two tasks the same problem: the expression, spaces ignored."""
    return "calculator:" + task["expression"].replace(" ", "")


def _guess(answer: str, rng: random.Random) -> str:
    """A plausible wrong-ish number: the answer with its last digits scrambled."""
    digits = list(answer)
    for k in range(max(1, len(digits) // 2)):
        digits[-1 - k] = str(rng.randrange(10))
    return "".join(digits).lstrip("0") or "0"


def demonstration(task: dict[str, Any], tool: Any = calculator) -> list[Message]:
    """A correct, tool-using conversation for `task` (for supervised warm starts).

    system, user, assistant calling `calculator`, the tool's reply (`tool`: `calculator` or a
    `logging_calculator`), assistant final answer.
    """
    result = tool(task["expression"])
    assert result.rsplit("\n", 1)[-1] == str(task["answer"]), (task, result)
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

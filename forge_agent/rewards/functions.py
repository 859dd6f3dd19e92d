"""Built-in reward functions: `fn(traj) -> float` (sync) or `async fn(traj) -> float`.

Every function reads a finished `Trajectory` and returns a float (or named floats); none
mutates it. Build them with the factories below and combine them in a `Rubric`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from forge_agent.types import Message, Trajectory

RewardValue = float | Mapping[str, float]
"""A reward: one number, or named numbers that a `Rubric` sums and logs one by one."""
RewardFn = Callable[[Trajectory], "RewardValue | Awaitable[RewardValue]"]
ProgramRewardFn = Callable[
    [dict[str, Any], Any, list[Message]], "RewardValue | Awaitable[RewardValue]"
]
"""An agent program's reward: `fn(task, result, transcript)`."""
JudgeFn = Callable[[str], Awaitable["float | str"]]


def _assistant_messages(traj: Trajectory) -> list[Message]:
    return [m for m in traj.messages if m.get("role") == "assistant"]


def _text(message: Message) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # OpenAI content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def final_answer_text(traj: Trajectory) -> str:
    """Content of the last assistant message with its thinking block removed ("" if none)."""
    msgs = _assistant_messages(traj)
    if not msgs:
        return ""
    text = _text(msgs[-1])
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text.strip()


def env_outcome(key: str | None = None) -> RewardFn:
    """The environment's own judgement: `traj.reward_components[key]` (falling back to
    `traj.info[key]`), or the sum of all `reward_components` when `key` is None."""

    def env_outcome_reward(traj: Trajectory) -> float:
        if key is None:
            return float(sum(traj.reward_components.values()))
        if key in traj.reward_components:
            return float(traj.reward_components[key])
        if key in traj.info:
            return float(traj.info[key])
        raise KeyError(f"env outcome {key!r} not in reward_components or info of {traj.task_id}")

    return env_outcome_reward


def program_reward(fn: ProgramRewardFn) -> RewardFn:
    """An agent program's reward, `fn(task, result, transcript) -> float | dict`, as a reward
    function of its trajectory: the task and the program's result come from `traj.info`
    ("task", "result", written by the agent rollout engine), the transcript is the
    conversation the endpoint recorded (`traj.messages`)."""

    def agent_program_reward(traj: Trajectory) -> RewardValue | Awaitable[RewardValue]:
        if "task" not in traj.info:
            raise KeyError(f"no 'task' in info of {traj.task_id}: not an agent-program episode")
        return fn(traj.info["task"], traj.info.get("result"), list(traj.messages))

    return agent_program_reward


def tool_use(error_penalty: float = 0.5) -> RewardFn:
    """Tool-use shaping: 1 if the episode called at least one tool, minus `error_penalty`
    times the fraction of tool calls that failed (malformed, unknown or raising)."""

    def tool_use_reward(traj: Trajectory) -> float:
        if traj.tool_call_count <= 0:
            return 0.0
        return 1.0 - error_penalty * traj.tool_error_count / traj.tool_call_count

    return tool_use_reward


def extract_boxed(text: str) -> str | None:
    r"""Content of the last `\boxed{...}` in `text` (nested braces allowed), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def _normalize_answer(s: str) -> str:
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    s = s.replace(" ", "").rstrip(".")
    try:
        f = float(s.replace(",", ""))
        return repr(int(f)) if f == int(f) else repr(f)
    except ValueError:
        return s.lower()


def boxed_answer_match(answer_key: str = "answer") -> RewardFn:
    r"""1.0 when the last `\boxed{}` of the final answer equals `traj.info[answer_key]`
    (after light normalisation: whitespace, `$`, `\text{}`, numeric form), else 0.0."""

    def boxed_answer_reward(traj: Trajectory) -> float:
        if answer_key not in traj.info:
            raise KeyError(f"no reference answer {answer_key!r} in info of {traj.task_id}")
        got = extract_boxed(final_answer_text(traj))
        if got is None:
            return 0.0
        return float(_normalize_answer(got) == _normalize_answer(str(traj.info[answer_key])))

    return boxed_answer_reward


_THINK = re.compile(r"^\s*<think>(.*?)</think>(.*)$", re.DOTALL)


def thinking_format(require_thinking: bool = True) -> RewardFn:
    """Fraction of assistant turns with a well-formed Qwen3-style thinking block: one leading
    `<think>...</think>` followed by an answer or tool calls. Without `require_thinking`, turns
    that have no think tags at all also count as well formed."""

    def thinking_format_reward(traj: Trajectory) -> float:
        msgs = _assistant_messages(traj)
        if not msgs:
            return 0.0
        good = 0
        for m in msgs:
            text = _text(m)
            if m.get("reasoning_content"):  # renderer already split the thinking out
                good += int("<think>" not in text and bool(text.strip() or m.get("tool_calls")))
                continue
            if "<think>" not in text and "</think>" not in text:
                good += int(not require_thinking)
                continue
            match = _THINK.match(text)
            ok = (
                match is not None
                and "<think>" not in match.group(1)
                and "</think>" not in match.group(2)
                and bool(match.group(2).strip() or m.get("tool_calls"))
            )
            good += int(ok)
        return good / len(msgs)

    return thinking_format_reward


def length_penalty(max_tokens: int, buffer_tokens: int) -> RewardFn:
    """DAPO soft overlong punishment (Yu et al. 2025, eq. 13) on the sampled length L:

    0                               if L <= L_max - L_buf
    ((L_max - L_buf) - L) / L_buf   if L_max - L_buf < L <= L_max
    -1                              if L > L_max
    """
    if not 0 < buffer_tokens <= max_tokens:
        raise ValueError(
            f"need 0 < buffer_tokens <= max_tokens, got buffer_tokens={buffer_tokens}, "
            f"max_tokens={max_tokens}"
        )

    def length_penalty_reward(traj: Trajectory) -> float:
        n = traj.num_sampled
        soft = max_tokens - buffer_tokens
        if n <= soft:
            return 0.0
        if n <= max_tokens:
            return (soft - n) / buffer_tokens
        return -1.0

    return length_penalty_reward


_SCORE = re.compile(r"(-?\d+(?:\.\d+)?)")

JUDGE_TEMPLATE = (
    "Rate the answer to the task from 0 to 10. Reply with the number only.\n"
    "Task: {task}\nAnswer: {answer}\nScore:"
)


def model_judge(
    judge: JudgeFn, template: str = JUDGE_TEMPLATE, scale: float = 10.0, task_key: str = "task"
) -> RewardFn:
    """An async reward that asks a judge model (any `async judge(prompt) -> str | float`, e.g.
    a generator actor call) to grade the final answer; returns the first number / `scale`."""

    async def model_judge_reward(traj: Trajectory) -> float:
        prompt = template.format(task=traj.info.get(task_key, ""), answer=final_answer_text(traj))
        verdict = await judge(prompt)
        if isinstance(verdict, int | float):
            return float(verdict) / scale
        match = _SCORE.search(verdict)
        if match is None:
            raise ValueError(f"judge reply has no score: {verdict[:200]!r}")
        return float(match.group(1)) / scale

    return model_judge_reward

"""Agent programs written against the plain `openai` client, as a user would write them.

Nothing here knows about forge-agent's tokens or sessions: each program gets an
`openai.AsyncOpenAI` client and a task, runs its own tool loop and returns its answer.
"""

from __future__ import annotations

import json
from typing import Any

from envs.calculator.env import SYSTEM_PROMPT
from forge_agent.toolkit.schema import tool_spec
from tools.calculator import calculator

CALCULATOR_TOOL = tool_spec(calculator)


async def calculator_agent(
    task: dict[str, Any], client: Any, *, stream: bool = False, max_turns: int = 4
) -> str:
    """Ask, run any calculator calls locally, send the results back, until a plain answer."""
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task["prompt"]},
    ]
    for _ in range(max_turns):
        kwargs = {
            "model": "policy",
            "messages": messages,
            "tools": [CALCULATOR_TOOL],
            "max_tokens": 96,
            "logprobs": True,
        }
        if stream:
            content, calls = await _streamed(client, kwargs)
        else:
            response = await client.chat.completions.create(**kwargs)
            message = response.choices[0].message
            content = message.content
            calls = [c.model_dump() for c in message.tool_calls or []]
        messages.append({"role": "assistant", "content": content, "tool_calls": calls or None})
        if not calls:
            return content or ""
        for call in calls:
            try:
                expression = json.loads(call["function"]["arguments"])["expression"]
                result = calculator(expression)
            except (ValueError, KeyError, TypeError) as exc:
                result = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return ""


async def _streamed(client: Any, kwargs: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """Accumulate a streamed completion the way streaming agents do: content deltas joined,
    tool-call deltas merged by index."""
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    stream = await client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    )
    async for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                call = calls.setdefault(
                    tc.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = tc.id or call["id"]
                if tc.function is not None:
                    call["function"]["name"] += tc.function.name or ""
                    call["function"]["arguments"] += tc.function.arguments or ""
    return content, [calls[i] for i in sorted(calls)]


async def rewriting_agent(task: dict[str, Any], client: Any) -> str:
    """A harness that rewrites its history between calls: after the first answer it drops the
    assistant turn and asks again with a summary, as context-compressing agents do."""
    first = await client.chat.completions.create(
        model="policy",
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": task["prompt"]},
        ],
        tools=[CALCULATOR_TOOL],
        max_tokens=64,
    )
    draft = first.choices[0].message.content or "(a tool call)"
    second = await client.chat.completions.create(
        model="policy",
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{task['prompt']}\nA first draft said: {draft[:40]}"},
        ],
        tools=[CALCULATOR_TOOL],
        max_tokens=64,
    )
    return second.choices[0].message.content or ""


def calculator_reward(task: dict[str, Any], result: Any, transcript: list[dict]) -> dict:
    """1 for the exact integer answer, plus whether the agent used the tool (logged only)."""
    from envs.calculator.env import extract_answer

    given = extract_answer(str(result or ""))
    correct = given is not None and int(given) == int(task["answer"])
    return {"correct": float(correct)}


async def raising_agent(task: dict[str, Any], client: Any) -> str:
    await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=8
    )
    raise RuntimeError("the agent program broke")


async def raising_before_asking_agent(task: dict[str, Any], client: Any) -> str:
    raise RuntimeError("the agent program broke before asking")


async def hanging_agent(task: dict[str, Any], client: Any) -> str:
    import asyncio

    await asyncio.sleep(3600)
    return ""


async def slow_tools_agent(task: dict[str, Any], client: Any) -> str:
    """Asks the policy, then runs the policy's answer as a slow tool call would (past the
    episode's reset deadline)."""
    import asyncio

    reply = await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=8
    )
    await asyncio.sleep(3600)  # the tool the policy's answer asked for, still running
    return reply.choices[0].message.content or ""

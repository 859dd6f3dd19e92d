"""The sql_mcp env: generated databases, questions answered through the real mcp-server-sqlite
inside the episode's bubblewrap sandbox, exact-match reward, served as OpenEnv."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from envs.sql_mcp import SqlMcpEnv, demonstration, generate_tasks
from envs.sql_mcp.tasks import query_result_text
from forge_agent.env import serve_openenv
from forge_agent.types import StepResult
from tests.mcp_servers import require_servers

pytestmark = pytest.mark.timeout(180)


def query_call(query: str) -> dict[str, Any]:
    function = {"name": "read_query", "arguments": json.dumps({"query": query})}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": "q", "function": function}]}


def play(task: dict[str, Any], query: str, answer: str) -> tuple[list, StepResult, StepResult]:
    async def episode() -> tuple[list, StepResult, StepResult]:
        env = SqlMcpEnv()
        try:
            _, tools = await env.reset(task, seed=0)
            tool_turn = await env.step(query_call(query))
            final = await env.step({"role": "assistant", "content": answer})
            return tools, tool_turn, final
        finally:
            await env.close()

    return asyncio.run(episode())


def test_tasks_are_seeded_and_their_answers_come_from_the_reference_query() -> None:
    tasks = generate_tasks(20, seed=3)
    assert tasks == generate_tasks(20, seed=3)
    assert tasks != generate_tasks(20, seed=4)
    for task in tasks:
        assert query_result_text(task["rows"], task["query"]).endswith(f": {task['answer']}}}]")
    env = SqlMcpEnv.__new__(SqlMcpEnv)
    train = {t["prompt"] + str(t["rows"]) for t in env.tasks("train", 50, 0)}
    held_out = {t["prompt"] + str(t["rows"]) for t in env.tasks("eval", 50, 0)}
    assert not train & held_out


def test_episode_queries_the_task_database_through_the_sandboxed_server() -> None:
    require_servers()
    task = generate_tasks(1, seed=11)[0]
    tools, tool_turn, final = play(task, task["query"], task["answer"])
    assert [t["function"]["name"] for t in tools] == ["read_query"]
    assert tool_turn.messages[0]["content"] == query_result_text(task["rows"], task["query"])
    assert tool_turn.info["tool_calls"] == 1 and tool_turn.info["tool_errors"] == 0
    assert final.done and final.rewards == {"correct": 1.0}
    assert final.info["outcome"] == "correct" and final.info["used_tool"]


def test_wrong_answer_and_failed_query_earn_nothing() -> None:
    require_servers()
    task = generate_tasks(1, seed=12)[0]
    wrong = str(int(task["answer"]) + 1)
    _, tool_turn, final = play(task, "SELECT * FROM nowhere", wrong)
    assert "no such table" in tool_turn.messages[0]["content"]
    assert final.rewards == {"correct": 0.0} and final.info["outcome"] == "wrong"
    _, _, final = play(task, task["query"], f"The answer is {task['answer']}")
    assert final.info["outcome"] == "no_answer"


def test_demonstrations_use_the_servers_tool_spec_and_its_answer_format() -> None:
    require_servers()
    env = SqlMcpEnv()
    convos = env.demonstrations(4, seed=0, demo_fraction=1.0)
    messages, tools = convos[0]
    assert [t["function"]["name"] for t in tools] == ["read_query"]
    assert tools[0]["function"]["parameters"]["required"] == ["query"]
    assert messages[2]["tool_calls"][0]["function"]["name"] == "read_query"
    task = generate_tasks(1, seed=5)[0]
    # the offline answer format is the server's: replay the demonstration's call for real
    _, tool_turn, _ = play(task, task["query"], task["answer"])
    assert tool_turn.messages[0]["content"] == demonstration(task)[3]["content"]


def test_served_as_openenv_over_websocket() -> None:
    require_servers()
    from openenv.core import GenericEnvClient

    task = generate_tasks(1, seed=21)[0]
    server = serve_openenv("envs.sql_mcp:SqlMcpEnv", host="127.0.0.1", port=0, block=False)
    assert server is not None

    async def main() -> tuple[Any, Any, Any]:
        async with GenericEnvClient(base_url=server.url) as client:
            reset = await client.reset(task=task, seed=0)
            tool_turn = await client.step({"message": query_call(task["query"])})
            final = await client.step({"message": {"role": "assistant", "content": task["answer"]}})
            return reset, tool_turn, final

    with server:
        reset, tool_turn, final = asyncio.run(main())
    assert reset.observation["tools"][0]["function"]["name"] == "read_query"
    assert tool_turn.observation["messages"][0]["content"].endswith(f": {task['answer']}}}]")
    assert final.done and final.reward == 1.0


def test_docs_mcp_example_runs_an_episode_with_the_filesystem_server() -> None:
    """The `py` block of the "Tools from an MCP server" section of docs/envs.md, run as is."""
    import re
    from pathlib import Path

    require_servers()
    docs = (Path(__file__).resolve().parents[1] / "docs" / "envs.md").read_text()
    section = docs[docs.index("## Tools from an MCP server") :]
    (block,) = re.findall(r"^```py\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/envs.md", "exec"), namespace)
    task = {"prompt": "What colour is the door?", "notes": "The door is green.", "answer": "green"}

    async def episode() -> tuple[list, StepResult, StepResult]:
        env = namespace["NotesEnv"]()
        try:
            _, tools = await env.reset(task, seed=0)
            function = {"name": "read_text_file", "arguments": {"path": "/workspace/notes.txt"}}
            tool_turn = await env.step(
                {"role": "assistant", "content": "", "tool_calls": [{"function": function}]}
            )
            final = await env.step({"role": "assistant", "content": "green"})
            return tools, tool_turn, final
        finally:
            await env.close()

    tools, tool_turn, final = asyncio.run(episode())
    assert [t["function"]["name"] for t in tools] == ["read_text_file", "list_directory"]
    assert tool_turn.messages[0]["content"] == "The door is green."
    assert final.rewards == {"correct": 1.0}

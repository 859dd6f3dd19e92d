"""MCP servers kept warm across episodes (`MCPToolEnv.reuse_servers`): started once for many
episodes, each episode on an emptied workspace, a dead server replaced by a fresh one."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from envs.sql_mcp import SqlMcpEnv, generate_tasks
from envs.sql_mcp.tasks import query_result_text
from forge_agent.env.adapters.mcp import MCPToolEnv
from forge_agent.sandbox import make_sandbox
from forge_agent.sandbox.admission import BUDGET_ENV, LEDGER_ENV
from forge_agent.toolkit.mcp import MCP_HOME
from forge_agent.toolkit.mcp.warm import WARM_SERVERS
from tests.mcp_servers import require_servers, sqlite_server

pytestmark = pytest.mark.timeout(180)


class ScratchDbEnv(MCPToolEnv):
    """A warm sqlite server with its write tools: episodes can leave tables behind."""

    mcp_servers = (sqlite_server(tools=("create_table", "list_tables", "read_query")),)
    reuse_servers = True

    def __init__(self) -> None:
        self.backend = make_sandbox("bwrap", ro_binds=[MCP_HOME])

    def make_sandbox(self) -> Any:
        return self.backend.session()

    def prepare_workspace(self, sandbox: Any) -> None:
        sandbox.write_file("note.txt", self.task["prompt"])

    def judge(self, answer: str) -> dict[str, float]:
        return {"reward": 0.0}


@pytest.fixture(autouse=True)
def no_warm_servers(tmp_path, monkeypatch) -> Iterator[None]:
    """No idle servers before or after; a sandbox memory budget of the test's own (the
    machine's is shared with whatever else runs sandboxes)."""
    require_servers()
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger"))
    monkeypatch.setenv(BUDGET_ENV, "16000")
    WARM_SERVERS.close()
    WARM_SERVERS.stats.clear()
    yield
    WARM_SERVERS.close()


def call(name: str, **arguments: Any) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": function}]}


async def episode(env: MCPToolEnv, task: dict[str, Any], *calls: dict) -> tuple[list[str], int]:
    """One episode on a fresh env instance (as an env worker runs them): the tool answers and
    the server's pid."""
    try:
        await env.reset(task, seed=0)
        pid = env.connections[0].pid
        assert pid is not None
        answers = [(await env.step(c)).messages[0]["content"] for c in calls]
        return answers, pid
    finally:
        await env.close()


def test_sql_mcp_starts_its_server_once_for_several_episodes() -> None:
    tasks = generate_tasks(3, seed=40)

    async def main() -> list[tuple[list[str], int]]:
        return [await episode(SqlMcpEnv(), t, call("read_query", query=t["query"])) for t in tasks]

    results = asyncio.run(main())
    pids = {pid for _, pid in results}
    assert len(pids) == 1, f"a server started per episode: pids {pids}"
    assert WARM_SERVERS.stats["reused"] == 2 and WARM_SERVERS.stats["given"] == 3
    for task, (answers, _) in zip(tasks, results, strict=True):  # each saw its own database
        assert answers == [query_result_text(task["rows"], task["query"])]


def test_an_episode_does_not_see_the_previous_episodes_writes() -> None:
    async def main() -> tuple[tuple[list[str], int], tuple[list[str], int]]:
        first = await episode(
            ScratchDbEnv(),
            {"prompt": "one"},
            call("create_table", query="CREATE TABLE leftover (x INTEGER)"),
            call("list_tables"),
        )
        second = await episode(ScratchDbEnv(), {"prompt": "two"}, call("list_tables"))
        return first, second

    (first, pid1), (second, pid2) = asyncio.run(main())
    assert "leftover" in first[1]
    assert pid1 == pid2  # the same server served both episodes
    assert "leftover" not in second[0], second[0]


def test_workspace_files_of_the_previous_episode_are_gone() -> None:
    async def main() -> list[str]:
        env = ScratchDbEnv()
        await env.reset({"prompt": "one"})
        env.sandbox.write_file("stray.txt", "from episode one")
        await env.close()
        env = ScratchDbEnv()
        await env.reset({"prompt": "two"})
        try:
            return sorted(os.listdir(env.sandbox.workspace))
        finally:
            await env.close()

    assert asyncio.run(main()) == ["note.txt"]  # the server made test.db at start: gone too


def test_a_server_that_died_while_idle_is_replaced_by_a_fresh_one() -> None:
    task = generate_tasks(1, seed=41)[0]

    async def main() -> tuple[int, tuple[list[str], int]]:
        env = SqlMcpEnv()
        await env.reset(task)
        conn = env.connections[0]
        pid = conn.pid
        await env.close()
        assert pid is not None and WARM_SERVERS.idle(env.warm_key()) == 1
        os.kill(pid, 9)
        for _ in range(100):
            if not conn.alive:
                break
            await asyncio.sleep(0.05)
        return pid, await episode(SqlMcpEnv(), task, call("read_query", query=task["query"]))

    dead_pid, (answers, pid) = asyncio.run(main())
    assert pid != dead_pid
    assert answers == [query_result_text(task["rows"], task["query"])]
    assert WARM_SERVERS.stats["dead"] == 1 and WARM_SERVERS.stats["reused"] == 0


def test_a_server_killed_mid_episode_is_restarted_and_its_count_ends_with_the_episode() -> None:
    task = generate_tasks(1, seed=42)[0]
    expected = query_result_text(task["rows"], task["query"])

    async def main() -> tuple[Any, Any, int]:
        env = SqlMcpEnv()
        await env.reset(task)
        conn = env.connections[0]
        os.kill(conn.pid, 9)
        while conn.alive:
            await asyncio.sleep(0.05)
        first = await env.step(call("read_query", query=task["query"]))
        await env.close()
        env = SqlMcpEnv()
        await env.reset(task)
        try:
            second = await env.step(call("read_query", query=task["query"]))
            return first, second, env.connections[0].restarts
        finally:
            await env.close()

    first, second, restarts = asyncio.run(main())
    assert first.messages[0]["content"] == expected
    assert first.info["mcp_errors"] == {"mcp_restart": 1}
    assert second.messages[0]["content"] == expected
    assert "mcp_errors" not in second.info and restarts == 0
    assert WARM_SERVERS.stats["reused"] == 1  # the restarted server was kept warm


def test_an_idle_server_is_not_kept_when_the_sandbox_budget_has_no_room(monkeypatch) -> None:
    monkeypatch.setenv(BUDGET_ENV, "1000")  # room for one sandbox of 768 MB, not two

    async def main() -> tuple[int, int]:
        first = await episode(ScratchDbEnv(), {"prompt": "one"}, call("list_tables"))
        second = await episode(ScratchDbEnv(), {"prompt": "two"}, call("list_tables"))
        return first[1], second[1]

    pid1, pid2 = asyncio.run(main())
    assert pid1 != pid2
    assert WARM_SERVERS.stats["closed"] == 2 and WARM_SERVERS.stats["given"] == 0

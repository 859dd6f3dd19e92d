"""The sql_mcp env: questions about a small SQLite database, answered by querying it through a
real MCP server (PyPI `mcp-server-sqlite`) that runs inside the episode's sandbox.

Each task carries its database (`rows`, generated from a seed); at reset the database file is
written into the episode's sandbox workspace, where `mcp-server-sqlite --db-path
/workspace/task.db` runs (no network, files confined to the workspace). The server is started
once and kept warm across the episodes of one process (`MCPToolEnv.reuse_servers`): each
episode gets the workspace emptied and its own `task.db`. The model sees one tool, the
server's `read_query`. Its final message (no tool calls) is the answer: the bare integer
(whitespace and one trailing period allowed). Rewards: `{"correct": 1.0 or 0.0}`
(exact match); info: `outcome` ("correct" | "wrong" | "no_answer"), `used_tool`, `answer`,
`expected`.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Hashable
from typing import Any

from envs.sql_mcp.tasks import database_bytes, generate_tasks, query_result_text
from forge_agent.env.adapters.mcp import MCPToolEnv
from forge_agent.sandbox import Limits, make_sandbox
from forge_agent.toolkit.mcp import MCP_HOME, MCPConnection, MCPServerConfig
from forge_agent.types import Message, ToolSpec

__all__ = ["SqlMcpEnv", "demonstration", "extract_answer", "sqlite_server"]

SYSTEM_PROMPT = (
    "Answer the question about the database. Call read_query with one SQL SELECT, then reply "
    "with only the number."
)
DB_PATH = "/workspace/task.db"
SESSION_LIMITS = Limits(wall_s=10, cpu_s=10, memory_mb=256, workspace_mb=16)
"""The episode sandbox's limits: the server's memory cgroup (it uses ~50 MB) and a workspace
for a database of a few KB. They are what the sandbox reserves of the host's sandbox memory
budget (272 MB: 70 sandboxes in a 19 GB budget, so 64 episodes and their warm servers fit)."""
EVAL_SEED_OFFSET = 1_000_003
"""Eval tasks come from seeds this far from the training seeds (their own stream)."""

_BARE = re.compile(r"-?\d+")


def sqlite_server() -> MCPServerConfig:
    """The env's MCP server: mcp-server-sqlite on the task's database, `read_query` only."""
    return MCPServerConfig(
        "sqlite",
        command=(f"{MCP_HOME}/bin/mcp-server-sqlite", "--db-path", DB_PATH),
        tools=("read_query",),
    )


def extract_answer(text: str) -> str | None:
    """The integer a final message gives, or None (see the module docstring)."""
    bare = text.strip().removesuffix(".").strip()
    return bare if _BARE.fullmatch(bare) else None


@functools.lru_cache(maxsize=1)
def server_tool_specs() -> tuple[ToolSpec, ...]:
    """The tool specs the server lists (asked once, from a real server in a sandbox)."""
    sandbox = make_sandbox("bwrap", ro_binds=[MCP_HOME])
    with sandbox.session() as session:
        conn = MCPConnection(sqlite_server(), session).start()
        try:
            return tuple(f.__tool_spec__ for f in conn.tools())  # type: ignore[attr-defined]
        finally:
            conn.close()


def demonstration(task: dict[str, Any]) -> list[Message]:
    """A correct conversation for `task`: the reference query through `read_query`, the
    server's answer (its format, computed offline with sqlite3), then the number."""
    result = query_result_text(task["rows"], task["query"])
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task["prompt"]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {
                        "name": "read_query",
                        "arguments": json.dumps({"query": task["query"]}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "name": "read_query", "content": result},
        {"role": "assistant", "content": task["answer"]},
    ]


class SqlMcpEnv(MCPToolEnv):
    """SQL questions answered through a sandboxed mcp-server-sqlite; exact-match reward.

    The server and its sandbox are kept warm across episodes (`reuse_servers`): the server
    opens the database file at every query, so each episode gets an emptied workspace with
    its task's `task.db` and no server start (0.44 s alone, seconds when many start at once).

    Args:
        sandbox_backend: "bwrap" (default) or "docker" (the server runs in the episode's
            sandbox either way; the backend must bind `MCP_HOME` read-only).
        limits: the episode sandbox's limits (default `SESSION_LIMITS`).
    """

    system_prompt = SYSTEM_PROMPT
    tool_timeout_s = 10.0
    max_tool_output_chars = 1_000
    required_fields = ("prompt", "rows", "answer")
    reuse_servers = True

    def __init__(self, sandbox_backend: str = "bwrap", limits: Limits | None = None) -> None:
        self.backend = make_sandbox(sandbox_backend, ro_binds=[MCP_HOME])
        self.limits = limits or SESSION_LIMITS

    def get_mcp_servers(self) -> list[MCPServerConfig]:
        return [sqlite_server()]

    def make_sandbox(self) -> Any:
        """A sandbox session for the server (kept warm across episodes, see the class doc)."""
        return self.backend.session(self.limits)

    def prepare_workspace(self, sandbox: Any) -> None:
        """The task's database, written into the (new or emptied) workspace."""
        sandbox.write_file("task.db", database_bytes(self.task["rows"]))

    def warm_key(self) -> Hashable:
        return (super().warm_key(), self.backend.name, self.limits)

    def default_task(self, seed: int) -> dict[str, Any]:
        return generate_tasks(1, seed=seed)[0]

    def tasks(self, split: str, n: int, seed: int) -> list[dict[str, Any]]:
        """`n` generated tasks; "eval" tasks come from a separate seed stream."""
        return generate_tasks(n, seed=seed + (EVAL_SEED_OFFSET if split == "eval" else 0))

    def demonstrations(
        self, n: int, seed: int, demo_fraction: float
    ) -> list[tuple[list[Message], list[ToolSpec]]]:
        """Query-then-answer demonstrations; a `1 - demo_fraction` share guesses instead."""
        rng = random.Random(seed)
        tools = list(server_tool_specs())
        convos = []
        for task in generate_tasks(n, seed=seed + 7919):
            demo = demonstration(task)
            if rng.random() >= demo_fraction:
                demo = [*demo[:2], {"role": "assistant", "content": str(rng.randint(1, 40))}]
            convos.append((demo, tools))
        return convos

    def corpus(self) -> list[tuple[list[Message], list[ToolSpec]]]:
        """Demonstrations, for the tiny model's tokenizer."""
        tools = list(server_tool_specs())
        return [(demonstration(t), tools) for t in generate_tasks(200, seed=12345)]

    def judge(self, answer: str) -> tuple[dict[str, float], dict[str, Any]]:
        given = extract_answer(answer)
        expected = str(self.task["answer"])
        outcome = "no_answer" if given is None else ("correct" if given == expected else "wrong")
        info = {
            "outcome": outcome,
            "used_tool": self.toolset.call_counts["read_query"] > 0,
            "answer": given,
            "expected": expected,
        }
        return {"correct": float(outcome == "correct")}, info

    async def close(self) -> None:
        await super().close()
        self.backend.close()

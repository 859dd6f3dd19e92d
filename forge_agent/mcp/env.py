"""`MCPToolEnv`: a `ToolEnv` whose tools come from MCP servers run in each episode's sandbox."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from forge_agent.env import ToolEnv, maybe_await
from forge_agent.mcp.client import MCPConnection
from forge_agent.mcp.config import MCPServerConfig
from forge_agent.toolset import ToolSet
from forge_agent.types import Message, StepResult, ToolSpec

__all__ = ["MCPToolEnv"]


class MCPToolEnv(ToolEnv):
    """A `ToolEnv` that also offers the tools of MCP servers.

    Subclasses set `mcp_servers` (or override `get_mcp_servers()` for per-task servers) and
    `make_sandbox()` (stdio servers need the episode's sandbox session: each server is started
    there at reset, after `make_sandbox()` returned, so files it needs can be written into the
    workspace first). The servers end with the episode (at the next reset or at close).

    Each step's info carries ``mcp_errors`` (the episode's MCP failures by kind so far).
    """

    mcp_servers: ClassVar[Sequence[MCPServerConfig]] = ()
    connections: list[MCPConnection]

    def get_mcp_servers(self) -> list[MCPServerConfig]:
        """The MCP servers of this episode (default: the class's `mcp_servers`)."""
        return list(self.mcp_servers)

    def get_tools(self) -> list[Callable[..., Any]]:
        """The class's Python tools, then the tools of every started server."""
        tools = list(self.tools)
        for conn in getattr(self, "connections", []):
            tools += conn.tools()
        return tools

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        """Like `ToolEnv.reset`, with the episode's servers started in its sandbox before the
        `ToolSet` is built."""
        await self._close_connections()
        await self._close_sandbox()
        self.task, self.seed = task, seed
        self.sandbox = await maybe_await(self.make_sandbox())
        try:
            for config in self.get_mcp_servers():
                conn = MCPConnection(config, self.sandbox)
                self.connections.append(conn)
                await asyncio.to_thread(conn.start)
        except BaseException:
            await self._close_connections()
            await self._close_sandbox()
            raise
        self.toolset = ToolSet(
            self.get_tools(),
            sandbox=self.sandbox,
            timeout_s=self.tool_timeout_s,
            max_output_chars=self.max_tool_output_chars,
        )
        return self.prompt(task), self.toolset.specs

    async def step(self, assistant_message: Message) -> StepResult:
        result = await super().step(assistant_message)
        errors: dict[str, int] = {}
        for conn in getattr(self, "connections", []):
            for kind, n in conn.error_counts.items():
                errors[kind] = errors.get(kind, 0) + n
        if errors:
            result.info["mcp_errors"] = errors
        return result

    async def close(self) -> None:
        await self._close_connections()
        await super().close()

    async def _close_connections(self) -> None:
        connections, self.connections = getattr(self, "connections", []), []
        for conn in connections:
            await asyncio.to_thread(conn.close)

"""`MCPToolEnv`: a `ToolEnv` whose tools come from MCP servers run in each episode's sandbox."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from forge_agent.env import ToolEnv, maybe_await
from forge_agent.toolkit.mcp.client import MCPConnection
from forge_agent.toolkit.mcp.config import MCPServerConfig
from forge_agent.toolkit.mcp.warm import WARM_SERVERS, ServerSet
from forge_agent.types import Message, StepResult, ToolSpec

if TYPE_CHECKING:
    from forge_agent.sandbox.base import SandboxSession

__all__ = ["MCPToolEnv"]


class MCPToolEnv(ToolEnv):
    """A `ToolEnv` that also offers the tools of MCP servers.

    Subclasses set `mcp_servers` (or override `get_mcp_servers()` for per-task servers) and
    `make_sandbox()` (stdio servers need the episode's sandbox session: each server is started
    there at reset, after `make_sandbox()` and `prepare_workspace()` returned, so files it needs
    can be written into the workspace first). The servers end with the episode (at the next
    reset or at close).

    With `reuse_servers = True` they do not: at close the session and its servers wait idle in
    this process (`forge_agent.toolkit.mcp.warm.WARM_SERVERS`), and the next episode's reset, on any
    instance of the class, takes them back, empties the workspace and calls
    `prepare_workspace()` again, without starting anything. Opt in only for servers whose
    state lives in the workspace (mcp-server-sqlite opens its database file per query): what a
    server holds in memory, or in its own ``/tmp``, outlives the episode. A set whose server
    died is closed and replaced by a fresh one.

    Each step's info carries ``mcp_errors`` (the episode's MCP failures by kind so far).
    """

    mcp_servers: ClassVar[Sequence[MCPServerConfig]] = ()
    reuse_servers: ClassVar[bool] = False
    connections: list[MCPConnection]

    def get_mcp_servers(self) -> list[MCPServerConfig]:
        """The MCP servers of this episode (default: the class's `mcp_servers`)."""
        return list(self.mcp_servers)

    def prepare_workspace(self, sandbox: SandboxSession) -> Awaitable[None] | None:
        """Write the episode's files into the (new or emptied) sandbox workspace, before its
        servers start or, with `reuse_servers`, before they serve this episode. May be async."""
        return None

    def warm_key(self) -> Hashable:
        """Which idle servers this env may take back (`reuse_servers`): its class and servers.
        Add what else makes sessions differ (the sandbox backend, its limits)."""
        cls = type(self)
        return (cls.__module__, cls.__qualname__, repr(self.get_mcp_servers()))

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
        await self._end_servers()
        self.task, self.seed = task, seed
        if not (self.reuse_servers and await self._take_warm_servers()):
            await self._start_servers()
        self.toolset = self.new_toolset()
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
        await self._end_servers()
        await super().close()

    async def _start_servers(self) -> None:
        """A new sandbox with the episode's files, and its servers started in it."""
        self.connections = []
        self.sandbox = await maybe_await(self.make_sandbox())
        try:
            await maybe_await(self.prepare_workspace(self.sandbox))
            for config in self.get_mcp_servers():
                conn = MCPConnection(config, self.sandbox)
                self.connections.append(conn)
                await asyncio.to_thread(conn.start)
        except BaseException:
            await self._close_servers()
            raise

    async def _take_warm_servers(self) -> bool:
        """Serve this episode on idle servers (workspace emptied and prepared); False when
        none is idle or preparing it failed (that set is closed)."""
        servers = WARM_SERVERS.take(self.warm_key())
        if servers is None:
            return False
        self.sandbox, self.connections = servers.sandbox, servers.connections
        try:  # nothing of the last episode stays: its files, the servers' /tmp and CPU time
            await asyncio.to_thread(self.sandbox.clear_workspace)
            await asyncio.to_thread(self.sandbox.renew_spawned)
            await maybe_await(self.prepare_workspace(self.sandbox))
        except Exception:
            await self._close_servers()
            return False
        for conn in self.connections:
            conn.begin_episode()
        return True

    async def _end_servers(self) -> None:
        """The episode's servers: kept warm (`reuse_servers`) or closed with the sandbox."""
        if self.reuse_servers and getattr(self, "connections", None) and self.sandbox is not None:
            servers = ServerSet(self.sandbox, self.connections)
            self.sandbox, self.connections = None, []
            await asyncio.to_thread(WARM_SERVERS.give, self.warm_key(), servers)
            return
        await self._close_servers()

    async def _close_servers(self) -> None:
        connections, self.connections = getattr(self, "connections", []), []
        for conn in connections:
            await asyncio.to_thread(conn.close)
        await self._close_sandbox()

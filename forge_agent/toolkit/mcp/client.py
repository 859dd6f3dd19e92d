"""A connection to one MCP server for one episode, and its tools as `ToolSet` tools.

    conn = MCPConnection(MCPServerConfig("sqlite", command=(...)), sandbox=session)
    conn.start()                        # spawn in the sandbox, initialize, list tools
    toolset = ToolSet(conn.tools(), sandbox=session, timeout_s=10)
    await toolset.call({"function": {"name": "read_query", "arguments": {...}}})
    conn.close()                        # ends the server (closing the session ends it too)

The `mcp` SDK's `ClientSession` runs on an event loop of its own, in a daemon thread: env
workers drive env methods with `run_until_complete`, so their loop is idle between steps, and a
session needs its reader running all the time. Tool calls from any loop are handed over with
`asyncio.run_coroutine_threadsafe`.

Failures never escape as exceptions other than `ToolError` (which the ToolSet turns into an
``Error: ...`` message and a counted metric): a result flagged ``isError`` or a JSON-RPC error
is ``mcp_server_error``; a server that exited is ``mcp_server_crash``; a call that outlives the
ToolSet's timeout is the ToolSet's ``timeout`` and the hung server is killed. A dead server
is restarted on the next call (`MCPServerConfig.max_restarts` times per episode).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import subprocess
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import mcp.types
from mcp import ClientSession
from mcp.shared.exceptions import McpError

from forge_agent.errors import InfraError
from forge_agent.toolkit.mcp.config import SERVER_LIMITS, MCPServerConfig
from forge_agent.toolkit.mcp.transport import StderrTail, process_transport
from forge_agent.toolkit.toolset import ToolError
from forge_agent.types import ToolSpec

if TYPE_CHECKING:
    from forge_agent.sandbox.base import SandboxSession

__all__ = ["MCPConnection", "MCPStartError", "tool_spec_of"]

SCHEMA_NOISE = ("$schema", "title")


def _retrieve(future: Any) -> None:
    """Mark a future's exception as seen (it is reported where it matters, not at GC)."""
    if not future.cancelled():
        future.exception()


class MCPStartError(InfraError):
    """An MCP server could not be started or initialized (an infrastructure failure)."""


def tool_spec_of(tool: mcp.types.Tool, name: str) -> ToolSpec:
    """The OpenAI function-calling schema of an MCP tool, offered to the model as `name`."""
    schema = {k: v for k, v in dict(tool.inputSchema or {}).items() if k not in SCHEMA_NOISE}
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return {
        "type": "function",
        "function": {"name": name, "description": tool.description or "", "parameters": schema},
    }


def result_text(result: mcp.types.CallToolResult) -> str:
    """The text of a tool result: its text parts, placeholders for binary parts, or else its
    structured content as JSON."""
    parts = []
    for block in result.content:
        if isinstance(block, mcp.types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp.types.EmbeddedResource):
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[resource {resource.uri}]")
        elif isinstance(block, mcp.types.ResourceLink):
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{block.type} {getattr(block, 'mimeType', '')}]".replace(" ]", "]"))
    if not parts and result.structuredContent is not None:
        return json.dumps(result.structuredContent, default=str)
    return "\n".join(parts)


class MCPConnection:
    """One MCP server of one episode: started in the episode's sandbox (stdio) or reached by URL.

    Args:
        config: the server to run or reach.
        sandbox: the episode's `SandboxSession` (needed for a stdio server, which it spawns).

    Attributes:
        error_counts: failures by kind (``mcp_server_error``, ``mcp_server_crash``,
            ``mcp_server_hang``, ``mcp_restart``).
        remote_tools: the server's tools as listed (after the `config.tools` filter).
    """

    def __init__(self, config: MCPServerConfig, sandbox: SandboxSession | None = None) -> None:
        if config.stdio and (sandbox is None or not hasattr(sandbox, "spawn")):
            raise ValueError(
                f"MCP server {config.name!r} is a stdio server: it needs the episode's sandbox "
                f"session (one with spawn()), got {type(sandbox).__name__}"
            )
        self.config = config
        self.sandbox = sandbox
        self.error_counts: collections.Counter[str] = collections.Counter()
        self.remote_tools: list[mcp.types.Tool] = []
        self.restarts = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"mcp-{config.name}", daemon=True
        )
        self._thread.start()
        self._session: ClientSession | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: StderrTail | None = None
        self._stop: asyncio.Event | None = None
        self._lifetime: asyncio.Future[None] | None = None
        self._broken: str | None = None
        self._restarting: concurrent.futures.Future[None] | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> MCPConnection:
        """Start (or reach) the server, initialize the session and list its tools.

        Raises:
            MCPStartError: naming the server, with its exit status and stderr when it died (the
                connection is closed then).
        """
        try:
            self._on_loop(self._open(), self.config.start_timeout_s + 5)
        except BaseException:
            self.close()
            raise
        return self

    async def _open(self) -> None:
        ready: asyncio.Future[None] = self._loop.create_future()
        ready.add_done_callback(_retrieve)
        self._stop = asyncio.Event()
        self._lifetime = asyncio.ensure_future(self._hold(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.start_timeout_s)
        except TimeoutError:
            await self._shut()
            raise MCPStartError(
                self._describe_failure(
                    f"did not answer initialize/list_tools within {self.config.start_timeout_s:g} s"
                )
            ) from None
        except BaseException as exc:
            await self._shut()
            raise MCPStartError(self._describe_failure(f"failed to start: {exc}")) from None
        self._broken = None

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        """The session's lifetime task: open, initialize, list tools, then wait for `_stop`."""
        config = self.config
        try:
            async with contextlib.AsyncExitStack() as stack:
                if config.stdio:
                    self._proc = self.sandbox.spawn(
                        list(config.command),
                        limits=(config.limits or SERVER_LIMITS).with_(
                            network=self.sandbox.limits.network
                        ),
                        env=config.env,
                    )
                    self._stderr = StderrTail(self._proc.stderr)
                    streams = await stack.enter_async_context(process_transport(self._proc))
                else:
                    from mcp.client.streamable_http import streamablehttp_client

                    read, write, _ = await stack.enter_async_context(
                        streamablehttp_client(config.url, timeout=config.start_timeout_s)
                    )
                    streams = (read, write)
                session = await stack.enter_async_context(ClientSession(*streams))
                await session.initialize()
                listed = await session.list_tools()
                tools = list(listed.tools)
                if config.tools is not None:
                    known = {t.name for t in tools}
                    missing = [n for n in config.tools if n not in known]
                    if missing:
                        raise MCPStartError(
                            f"MCP server {config.name!r} has no tool(s) {missing}; it offers "
                            f"{sorted(known)}"
                        )
                    tools = [t for t in tools if t.name in config.tools]
                self.remote_tools, self._session = tools, session
                ready.set_result(None)
                assert self._stop is not None
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._session = None
            self._end_process()

    async def _shut(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._lifetime is not None:
            self._end_process()  # a hung server must not hold the shutdown
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._lifetime, 5)
        self._lifetime = None

    def _end_process(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def begin_episode(self) -> None:
        """Count errors and restarts afresh: the connection serves a next episode (a server
        kept warm across episodes, `forge_agent.toolkit.mcp.warm`)."""
        self.error_counts = collections.Counter()
        self.restarts = 0

    def close(self) -> None:
        """End the server and the connection's thread. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._on_loop(self._shut(), 10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def _on_loop(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def alive(self) -> bool:
        """True while the session is open (and, for stdio, the server process runs)."""
        if self._session is None or self._broken is not None:
            return False
        return self._proc is None or self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The host pid of the running stdio server's process (its sandbox), or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _describe_failure(self, what: str) -> str:
        text = f"MCP server {self.config.name!r}"
        if self.config.stdio:
            text += f" ({' '.join(self.config.command)})"
        text += f" {what}"
        if self._proc is not None and self._proc.poll() is not None:
            text += f"; exit status {self._proc.returncode}"
        tail = self._stderr.text() if self._stderr is not None else ""
        if tail:
            text += f"; stderr: {tail[-600:]}"
        return text

    # -- tools -------------------------------------------------------------------------------

    def tools(self) -> list[Callable[..., Any]]:
        """The server's tools as async functions a `ToolSet` accepts (schemas attached)."""
        return [self._tool(t) for t in self.remote_tools]

    def _tool(self, remote: mcp.types.Tool) -> Callable[..., Any]:
        name = f"{self.config.prefix}{remote.name}"
        remote_name = remote.name

        async def call_mcp_tool(**arguments: Any) -> str:
            return await self.call(remote_name, arguments)

        call_mcp_tool.__name__ = name
        call_mcp_tool.__qualname__ = name
        call_mcp_tool.__doc__ = remote.description
        call_mcp_tool.__tool_spec__ = tool_spec_of(remote, name)  # type: ignore[attr-defined]
        return call_mcp_tool

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call `tool` on the server; its text, or a `ToolError` naming what went wrong.

        A server found dead is restarted first. Cancelling the call (a ToolSet timeout) counts
        the server as hung, kills it and starts a fresh one in the background.
        """
        if self._closed:
            raise ToolError(f"MCP server {self.config.name!r} is closed", "mcp_server_crash")
        if self._restarting is None and not self.alive:
            self._begin_restart()
        if self._restarting is not None:
            restart = self._restarting
            try:  # the restart goes on even if this call is cancelled
                await asyncio.shield(asyncio.wrap_future(restart))
            except MCPStartError as exc:
                raise ToolError(
                    f"{exc} (restart after it {self._broken})", "mcp_server_crash"
                ) from None
            finally:
                if restart.done() and self._restarting is restart:
                    self._restarting = None
        future = asyncio.run_coroutine_threadsafe(self._call(tool, arguments), self._loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self.error_counts["mcp_server_hang"] += 1
            self._broken = "hung"
            self._end_process()
            with contextlib.suppress(ToolError):
                self._begin_restart()
            raise

    def _begin_restart(self) -> None:
        """Start a fresh server on the connection's loop (`self._restarting` tracks it)."""
        why = self._broken or "exited"
        if self.restarts >= self.config.max_restarts:
            raise ToolError(
                self._describe_failure(
                    f"is down ({why}) and was restarted {self.restarts} times already"
                ),
                "mcp_server_crash",
            )
        self.restarts += 1
        self.error_counts["mcp_restart"] += 1
        self._broken = why
        self._restarting = asyncio.run_coroutine_threadsafe(self._reopen(), self._loop)
        self._restarting.add_done_callback(_retrieve)

    async def _reopen(self) -> None:
        await self._shut()
        await self._open()

    async def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        session = self._session
        if session is None:
            raise ToolError(self._describe_failure("is not running"), "mcp_server_crash")
        try:
            result = await session.call_tool(tool, arguments)
        except McpError as exc:
            if self._proc is not None and self._proc.poll() is not None:
                self.error_counts["mcp_server_crash"] += 1
                self._broken = "crashed"
                raise ToolError(
                    self._describe_failure(f"crashed during the call of {tool!r}"),
                    "mcp_server_crash",
                ) from None
            if "Connection closed" in str(exc):
                self.error_counts["mcp_server_crash"] += 1
                self._broken = "closed the connection"
                raise ToolError(
                    self._describe_failure(f"closed the connection during {tool!r}"),
                    "mcp_server_crash",
                ) from None
            self.error_counts["mcp_server_error"] += 1
            raise ToolError(
                f"MCP server {self.config.name!r} refused {tool!r}: {exc}", "mcp_server_error"
            ) from None
        text = result_text(result)
        if result.isError:
            self.error_counts["mcp_server_error"] += 1
            raise ToolError(text or f"{tool!r} failed (no details)", "mcp_server_error")
        return text

"""The MCP stdio transport over a process that is already running (e.g. one a sandbox spawned).

The `mcp` SDK's `stdio_client` starts the server itself, on the host; here the sandbox starts it
(`SandboxSession.spawn`) and hands over its pipes, and this module bridges them to the memory
streams `mcp.ClientSession` reads and writes: one JSON-RPC message per line, as the stdio
transport of the MCP specification says.
"""

from __future__ import annotations

import collections
import contextlib
import subprocess
import threading
from collections.abc import AsyncIterator
from typing import IO

import anyio
import mcp.types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

__all__ = ["StderrTail", "process_transport"]

MAX_LINE_BYTES = 16 * 1024 * 1024
"""A longer line from the server is a protocol error (it is dropped, the connection closed)."""


class StderrTail:
    """Drains a process's stderr in a daemon thread (so a chatty server never blocks on a full
    pipe) and keeps its last `keep` bytes for error messages."""

    def __init__(self, stream: IO[bytes] | None, keep: int = 4096) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._keep = keep
        self._lock = threading.Lock()
        if stream is not None:
            threading.Thread(target=self._drain, args=(stream,), daemon=True).start()

    def _drain(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: stream.read1(4096), b""):  # type: ignore[attr-defined]
                with self._lock:
                    self._chunks.append(chunk)
                    self._size += len(chunk)
                    while self._size - len(self._chunks[0]) >= self._keep:
                        self._size -= len(self._chunks.popleft())

    def text(self) -> str:
        """The last bytes written, decoded, stripped."""
        with self._lock:
            data = b"".join(self._chunks)[-self._keep :]
        return data.decode("utf-8", "replace").strip()


def _write_line(stream: IO[bytes], data: bytes) -> None:
    stream.write(data)
    stream.flush()


@contextlib.asynccontextmanager
async def process_transport(
    proc: subprocess.Popen[bytes],
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
    """(read stream, write stream) of an MCP stdio server running as `proc`.

    The read stream ends when the server closes its stdout (it exited or crashed), which makes
    the `ClientSession` fail its pending requests; a write to a dead server is dropped the same
    way. The process itself is the caller's to end.
    """
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_lines() -> None:
        async with read_send:
            while True:
                try:
                    line = await anyio.to_thread.run_sync(
                        stdout.readline, MAX_LINE_BYTES, abandon_on_cancel=True
                    )
                except (OSError, ValueError):
                    return
                if not line or (len(line) >= MAX_LINE_BYTES and not line.endswith(b"\n")):
                    return
                if not line.strip():
                    continue
                try:
                    message = mcp.types.JSONRPCMessage.model_validate_json(line)
                except Exception as exc:  # the session reports it and goes on
                    await read_send.send(exc)
                    continue
                await read_send.send(SessionMessage(message))

    async def write_lines() -> None:
        async with write_recv:
            async for session_message in write_recv:
                data = session_message.message.model_dump_json(by_alias=True, exclude_none=True)
                try:
                    await anyio.to_thread.run_sync(
                        _write_line, stdin, data.encode() + b"\n", abandon_on_cancel=True
                    )
                except (OSError, ValueError):  # the server is gone; the reader sees EOF
                    return

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_lines)
        tasks.start_soon(write_lines)
        try:
            yield read_recv, write_send
        finally:
            tasks.cancel_scope.cancel()

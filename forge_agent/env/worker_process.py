"""The env worker process: serves several env instances ("slots") at once.

Started by `EnvWorker` as `python -m forge_agent.env.worker_process`. Frames on stdin/stdout are a
4-byte big-endian length and a pickle. Requests: (request_id, slot, command, *args) with the
commands ("init", spec, kwargs) (slot None), ("reset", task, seed), ("step", message),
("close",); ("exit",) ends the process. Replies: (request_id, "ok", value) or
(request_id, "error", text, traceback, blame) where `blame` is the status a step that raised
it ends with (`forge_agent.env.protocol.step_failure`); "init" answers with the env class's
`failure_reward`.

Each slot is one env instance (built at its first reset after a close) whose requests run in
order. By default a slot is served by a thread of its own with its own event loop, so an env
written with blocking sync methods holds up only its own episode; an env class that declares
`shares_event_loop` (agent programs: they only await HTTP) has all its slots served as tasks on
one event loop instead. The env's own prints go to stderr so they cannot
corrupt the protocol.

At exit (an "exit" request or the controller's pipe closing) each slot closes its env, then
each event loop is closed after the env class's optional `close_shared()` has released what its
instances shared on that loop (agent programs: the loopback HTTP client): nothing is left for
the interpreter to collect at shutdown, where an unclosed loop's `__del__` can find its
self-pipe socket already gone ("ValueError: Invalid file descriptor: -1") and an unclosed
aiohttp session logs "Unclosed client session".
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import pickle
import queue
import signal
import struct
import sys
import threading
import time
import traceback
from typing import IO, TYPE_CHECKING, Any

from forge_agent.env.protocol import EnvFailure, step_failure
from forge_agent.types import Status

if TYPE_CHECKING:
    from forge_agent.env.registry import EnvSpec

_HEADER = struct.Struct(">I")
_EXIT = ("exit",)
_EXIT_GRACE_S = 4.0
"""How long the slots have, all together, to finish and close at exit (`EnvWorker.shutdown`
kills the worker 5 s after asking it to exit)."""


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the controller dies (best effort)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _read(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    return pickle.loads(stream.read(size))


class _Replies:
    """Reply frames, written whole by whichever slot thread finishes."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def send(self, reply: tuple[Any, ...]) -> None:
        try:
            data = pickle.dumps(reply)
        except Exception as exc:
            text = f"could not send the result to the controller: {exc!r}"
            data = pickle.dumps((reply[0], "error", text, ""))
        with self.lock:
            if self.stream.closed:  # a slot that outlived the exit: no one is listening
                return
            self.stream.write(_HEADER.pack(len(data)) + data)
            self.stream.flush()

    def close(self) -> None:
        with self.lock, contextlib.suppress(OSError):  # the controller may be gone
            self.stream.close()


class _Slot:
    """One env instance; its requests run in order and each is answered on `replies`."""

    def __init__(self, spec: EnvSpec, kwargs: dict[str, Any], replies: _Replies) -> None:
        self.spec, self.kwargs, self.replies = spec, kwargs, replies
        self.env: Any = None

    async def _answer(self, request: tuple[Any, ...]) -> None:
        request_id, command, args = request[0], request[1], request[2:]
        try:
            value = await self._handle(command, args)
        except BaseException as exc:
            text = "".join(traceback.format_exception(exc))
            # whose failure: a step's by the rule of blame; any other command's is infra
            # unless the env says otherwise (an `EnvFailure`: an agent program's reset)
            if command == "step" or isinstance(exc, EnvFailure):
                blame = step_failure(exc, None)[0].value
            else:
                blame = Status.ENV_ERROR.value
            self.replies.send((request_id, "error", f"{type(exc).__name__}: {exc}", text, blame))
            return
        self.replies.send((request_id, "ok", value))

    async def _handle(self, command: str, args: tuple[Any, ...]) -> Any:
        if command == "reset":
            if self.env is None:
                self.env = self.spec.make(**self.kwargs)
            return await self.env.reset(*args)
        if command == "step":
            if self.env is None:
                raise RuntimeError("step() before reset()")
            return await self.env.step(*args)
        if command == "close":
            if self.env is not None:
                self.env, closing = None, self.env
                await closing.close()
            return None
        raise ValueError(f"unknown request {command!r}")

    async def _close(self) -> None:
        if self.env is not None:
            with contextlib.suppress(Exception):  # exiting anyway
                await self.env.close()


async def _close_shared(spec: Any) -> None:
    """Await the env class's optional `close_shared()` on the running loop (what the env's
    instances shared on it), before that loop closes."""
    with contextlib.suppress(Exception):  # exiting anyway; an import error was reported
        close_shared = getattr(spec.factory(), "close_shared", None)
        if close_shared is not None:
            done = close_shared()
            if inspect.isawaitable(done):
                await done


class _ThreadSlot(_Slot):
    """A slot served by a thread of its own with its own event loop: an env with blocking
    sync methods holds up only its own episode."""

    def __init__(self, spec: EnvSpec, kwargs: dict[str, Any], replies: _Replies) -> None:
        super().__init__(spec, kwargs, replies)
        self.requests: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def put(self, request: tuple[Any, ...]) -> None:
        self.requests.put(request)

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)

    @property
    def finished(self) -> bool:
        return not self.thread.is_alive()

    def _serve(self) -> None:
        # the runner closes the loop on every path: its tasks cancelled, async generators
        # and default executor shut down
        with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
            loop = runner.get_loop()
            while (request := self.requests.get()) != _EXIT:
                loop.run_until_complete(self._answer(request))
            loop.run_until_complete(self._close())
            loop.run_until_complete(_close_shared(self.spec))


class _LoopSlot(_Slot):
    """A slot served by a task on the worker's one shared event loop, for envs that never
    block it (agent programs awaiting HTTP): no thread per episode, so no GIL handoffs
    between dozens of threads (64 agent programs' openai clients: ~2.4 ms of CPU a request with
    a thread each, 2.15 ms on a shared loop per worker; `python -m apps.bench.proxy`)."""

    def __init__(
        self,
        spec: EnvSpec,
        kwargs: dict[str, Any],
        replies: _Replies,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(spec, kwargs, replies)
        self.loop = loop
        self.requests: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.done = asyncio.run_coroutine_threadsafe(self._serve(), loop)

    def put(self, request: tuple[Any, ...]) -> None:
        self.loop.call_soon_threadsafe(self.requests.put_nowait, request)

    def join(self, timeout_s: float) -> None:
        with contextlib.suppress(Exception):
            self.done.result(timeout_s)

    @property
    def finished(self) -> bool:
        return self.done.done()

    async def _serve(self) -> None:
        while (request := await self.requests.get()) != _EXIT:
            await self._answer(request)
        await self._close()


class _SharedLoop:
    """The one event loop of a worker's `_LoopSlot`s, run by a thread of its own."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
        self.loop = self.runner.get_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def close(self, spec: EnvSpec, timeout_s: float) -> None:
        """Stop the loop, release what the env's instances shared on it and close it (call
        once its slots have finished)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout_s)
        if self.thread.is_alive():  # an env blocks the loop: it dies with the process
            return
        with self.runner:  # closes the loop, its stray tasks cancelled
            self.loop.run_until_complete(_close_shared(spec))


def _shares_loop(spec: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the env's instances run on one shared event loop: its class's
    `shares_event_loop` (a bool, or a function of the env's keyword arguments)."""
    try:
        flag = getattr(spec.factory(), "shares_event_loop", False)
        return bool(flag(**{**spec.kwargs, **kwargs}) if callable(flag) else flag)
    except Exception:  # an import error surfaces at the first reset, naming the env
        return False


def _failure_reward(spec: Any, kwargs: dict[str, Any]) -> float:
    """The env class's `failure_reward`, or its `failure_reward_of(**kwargs)` where the value
    depends on the env's arguments (a Gymnasium id's worst step); 0.0 without one, or when it
    does not import (that error surfaces at the first reset, naming the env)."""
    try:
        factory = spec.factory()
        of = getattr(factory, "failure_reward_of", None)
        if callable(of):
            return float(of(**{**spec.kwargs, **kwargs}))
        return float(getattr(factory, "failure_reward", 0.0))
    except Exception:
        return 0.0


def main() -> None:
    _die_with_parent()
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the env's prints go to stderr
    sys.stdout = sys.stderr
    protocol_in = sys.stdin.buffer
    replies = _Replies(protocol_out)
    spec, kwargs = None, {}
    shared: _SharedLoop | None = None
    slots: dict[int, _ThreadSlot | _LoopSlot] = {}
    try:
        while True:
            request = _read(protocol_in)
            if request is None or request[0] == "exit":
                break
            request_id, slot, command, args = request[0], request[1], request[2], request[3:]
            if command == "init":
                spec, kwargs = args
                if _shares_loop(spec, kwargs):
                    shared = _SharedLoop()
                replies.send((request_id, "ok", _failure_reward(spec, kwargs)))
            elif spec is None:
                replies.send((request_id, "error", f"{command} before init", ""))
            else:
                if slot not in slots:
                    if shared is not None:
                        slots[slot] = _LoopSlot(spec, kwargs, replies, shared.loop)
                    else:
                        slots[slot] = _ThreadSlot(spec, kwargs, replies)
                slots[slot].put((request_id, command, *args))
    finally:
        deadline = time.monotonic() + _EXIT_GRACE_S
        for each in slots.values():
            each.put(_EXIT)
        for each in slots.values():
            each.join(max(deadline - time.monotonic(), 0.0))
        # a slot still running an episode keeps the shared loop: it dies with the process
        if shared is not None and all(each.finished for each in slots.values()):
            shared.close(spec, max(deadline - time.monotonic(), 0.0))
        replies.close()


if __name__ == "__main__":
    main()

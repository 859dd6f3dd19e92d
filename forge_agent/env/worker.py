"""Env workers: env instances live in child processes, never in the controller's event loop.

`EnvWorker` is one child process (`python -m forge_agent.env._worker_main`) speaking a small
pickle protocol over its stdin/stdout pipes; every request has a timeout. `EnvPool` keeps up to
`size` warm workers and lends one per episode:

    pool = EnvPool("calculator", size=8, step_timeout_s=30, reset_timeout_s=60)
    async with pool.lease() as env:          # an AgentEnv backed by one worker
        messages, tools = await env.reset(task, seed)
        result = await env.step(assistant_message)
    await pool.close()

Failures surface as `EnvFailure`: a request past its timeout -> `Status.ENV_TIMEOUT` (the worker
is killed); an env that raises or a worker that dies -> `Status.ENV_ERROR` with the error text.
A failed worker is never reused: the next episode runs on a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, Self

from forge_agent.env.protocol import EnvFailure
from forge_agent.env.registry import EnvSpec, env_spec
from forge_agent.types import Message, Status, StepResult, ToolSpec

__all__ = ["EnvLease", "EnvPool", "EnvWorker"]

_HEADER = struct.Struct(">I")


class EnvWorker:
    """One env worker process. Requests are serialized; each has its own timeout.

    Args:
        spec: what env to build (an `EnvSpec`, a registered id or a "module:Factory" string).
        env_kwargs: constructor arguments over the spec's defaults (must pickle).
    """

    def __init__(self, spec: EnvSpec | str, env_kwargs: dict[str, Any] | None = None) -> None:
        self.spec = env_spec(spec) if isinstance(spec, str) else spec
        self.env_kwargs = dict(env_kwargs or {})
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self.failure: EnvFailure | None = None  # set once the worker is unusable

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None and self.failure is None

    async def start(self, timeout_s: float = 60.0) -> None:
        """Start the process and hand it the env spec (the env itself is built at reset)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p) or env.get("PYTHONPATH", "")
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "forge_agent.env._worker_main",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group, killed as a whole
        )
        await self._request(("init", self.spec, self.env_kwargs), timeout_s, "start")

    async def reset(
        self, task: dict[str, Any], seed: int | None, timeout_s: float
    ) -> tuple[list[Message], list[ToolSpec]]:
        messages, tools = await self._request(("reset", task, seed), timeout_s, "reset")
        return messages, tools

    async def step(self, assistant_message: Message, timeout_s: float) -> StepResult:
        result = await self._request(("step", assistant_message), timeout_s, "step")
        return result

    async def close_env(self, timeout_s: float) -> None:
        """Close the current env instance (the process stays, ready for the next one)."""
        await self._request(("close",), timeout_s, "close")

    async def kill(self) -> None:
        """Kill the process group at once and reap it."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 5.0)
        if self.failure is None:
            self.failure = EnvFailure(Status.ENV_ERROR, f"env worker {proc.pid} was shut down")

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Ask the worker to close its env and exit; kill it if it does not."""
        proc = self._proc
        if proc is not None and proc.returncode is None and proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.write(_frame(("exit",)))
                await proc.stdin.drain()
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), timeout_s)
        await self.kill()

    async def _request(self, request: tuple[Any, ...], timeout_s: float, what: str) -> Any:
        if self.failure is not None:
            raise EnvFailure(self.failure.status, f"env worker is gone: {self.failure.message}")
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise RuntimeError("EnvWorker.start() was not called")
        async with self._lock:
            try:
                frame = _frame(request)
            except Exception as exc:
                raise EnvFailure(
                    Status.ENV_ERROR, f"could not send {what} request: {exc!r}"
                ) from exc
            try:
                proc.stdin.write(frame)
                reply = await asyncio.wait_for(self._read_reply(proc, proc.stdin), timeout_s)
            except TimeoutError:
                await self._fail(
                    Status.ENV_TIMEOUT,
                    f"env {self.spec.env_id!r} {what} did not finish within {timeout_s:g} s; "
                    f"worker {proc.pid} killed",
                )
            except asyncio.CancelledError:
                # The reply would arrive later and desync the protocol: drop the worker.
                self.failure = EnvFailure(Status.ENV_ERROR, f"{what} was cancelled")
                await asyncio.shield(self.kill())
                raise
            except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 2.0)
                await self._fail(
                    Status.ENV_ERROR,
                    f"env {self.spec.env_id!r} worker {proc.pid} died during {what} "
                    f"({_exit_text(proc.returncode)})",
                )
        if reply[0] == "error":
            # The env's state after an exception is unknown: never reuse this worker.
            await self._fail(Status.ENV_ERROR, f"env {self.spec.env_id!r} {what} raised {reply[1]}")
        return reply[1]

    @staticmethod
    async def _read_reply(proc: asyncio.subprocess.Process, stdin: asyncio.StreamWriter) -> Any:
        assert proc.stdout is not None
        await stdin.drain()
        header = await proc.stdout.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        return pickle.loads(await proc.stdout.readexactly(size))

    async def _fail(self, status: Status, message: str) -> None:
        self.failure = EnvFailure(status, message)
        await self.kill()
        self.failure = EnvFailure(status, message)
        raise self.failure


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj)
    return _HEADER.pack(len(data)) + data


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class EnvLease:
    """One episode's env: an `AgentEnv` backed by a pooled worker. `close()` returns it."""

    def __init__(self, pool: EnvPool, worker: EnvWorker) -> None:
        self._pool = pool
        self.worker = worker
        self._closed = False

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        return await self._guard(self.worker.reset(task, seed, self._pool.reset_timeout_s))

    async def step(self, assistant_message: Message) -> StepResult:
        return await self._guard(self.worker.step(assistant_message, self._pool.step_timeout_s))

    async def close(self) -> None:
        """End the episode: close the env instance and give the worker back to the pool."""
        if self._closed:
            return
        self._closed = True
        await self._pool._release(self.worker)

    async def _guard(self, coro: Any) -> Any:
        if self._closed:
            coro.close()
            raise RuntimeError("this env lease is closed")
        try:
            return await coro
        except EnvFailure as failure:
            self._pool._count(failure.status)
            raise


class EnvPool:
    """Up to `size` env workers of one env, lent one per episode.

    Args:
        env_id: a registered env id, a "module:Factory" entry point or an `EnvSpec`.
        size: the most workers alive (and episodes running) at once.
        step_timeout_s: bound on one `step`; past it the worker is killed (`ENV_TIMEOUT`).
        reset_timeout_s: bound on `reset` (which also builds the env) and on a worker's start.
        close_timeout_s: bound on closing an env at the end of an episode.
        env_kwargs: constructor arguments for every env (must pickle).
    """

    def __init__(
        self,
        env_id: str | EnvSpec,
        size: int = 8,
        step_timeout_s: float = 60.0,
        reset_timeout_s: float = 120.0,
        close_timeout_s: float = 30.0,
        env_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"EnvPool size must be at least 1, got {size}")
        self.spec = env_spec(env_id) if isinstance(env_id, str) else env_id
        self.size = size
        self.step_timeout_s = step_timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.close_timeout_s = close_timeout_s
        self.env_kwargs = dict(env_kwargs or {})
        self._idle: list[EnvWorker] = []
        self._slots = asyncio.Semaphore(size)
        self._busy: set[EnvWorker] = set()
        self._closed = False
        self.stats: dict[str, float] = {
            "workers_started": 0,
            "workers_replaced": 0,
            "env_timeouts": 0,
            "env_errors": 0,
            "worker_start_s": 0.0,
        }

    async def start(self) -> None:
        """Warm up: start all `size` workers now instead of at first use."""
        missing = self.size - len(self._idle) - len(self._busy)
        workers = await asyncio.gather(*(self._new_worker() for _ in range(missing)))
        self._idle.extend(workers)

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[EnvLease]:
        """`async with pool.lease() as env:` one episode on one worker."""
        env = await self.acquire()
        try:
            yield env
        finally:
            await env.close()

    async def acquire(self) -> EnvLease:
        """Wait for a free worker (starting one if needed); `close()` the lease to return it."""
        if self._closed:
            raise RuntimeError("EnvPool is closed")
        await self._slots.acquire()
        try:
            while self._idle and not self._idle[-1].alive:  # died while idle
                await self._idle.pop().kill()
            worker = self._idle.pop() if self._idle else await self._new_worker()
        except BaseException:
            self._slots.release()
            raise
        self._busy.add(worker)
        return EnvLease(self, worker)

    async def close(self) -> None:
        """Stop every worker (busy ones too)."""
        self._closed = True
        workers = self._idle + list(self._busy)
        self._idle, self._busy = [], set()
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _new_worker(self) -> EnvWorker:
        worker = EnvWorker(self.spec, self.env_kwargs)
        started = time.monotonic()
        try:
            await worker.start(self.reset_timeout_s)
        except EnvFailure as failure:
            self._count(failure.status)
            raise
        self.stats["workers_started"] += 1
        self.stats["worker_start_s"] += time.monotonic() - started
        return worker

    async def _release(self, worker: EnvWorker) -> None:
        try:
            if worker.alive:
                try:
                    await worker.close_env(self.close_timeout_s)
                except EnvFailure as failure:
                    self._count(failure.status)
            if worker.alive and not self._closed:
                self._idle.append(worker)
            else:
                await worker.kill()
                if not self._closed:
                    self.stats["workers_replaced"] += 1
        finally:
            self._busy.discard(worker)
            self._slots.release()

    def _count(self, status: Status) -> None:
        key = "env_timeouts" if status is Status.ENV_TIMEOUT else "env_errors"
        self.stats[key] += 1

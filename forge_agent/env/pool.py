"""Env workers: env instances live in child processes, never in the controller's event loop.

`EnvWorker` is one child process (`python -m forge_agent.env.worker_process`) speaking a small
pickle protocol over its stdin/stdout pipes. It serves up to `slots` env instances at once
(each on a thread of its own there); every request names its slot and has its own timeout.
`EnvPool` keeps up to `size` env instances on `ceil(size / envs_per_worker)` warm workers and
lends one instance per episode:

    pool = EnvPool(ResolvedEnv.of("calculator", step_timeout_s=30), size=64, envs_per_worker=32)
    async with pool.lease() as env:          # an AgentEnv backed by one slot of one worker
        messages, tools = await env.reset(task, seed)
        result = await env.step(assistant_message)
    await pool.close()

Failures surface as `EnvFailure`, blamed by the rule of `forge_agent.env.protocol.step_failure`:
a step past its timeout -> `Status.POLICY_TIMEOUT` and a step that raises -> `Status.POLICY_ERROR`
(the policy's message caused them; they carry the env's failure reward), unless the exception
is an `InfraError`; a start, reset or close past its timeout -> `Status.ENV_TIMEOUT`, one that
raises -> `Status.ENV_ERROR`; a worker that dies -> `Status.ENV_ERROR` for every episode it was
running. A slot that failed keeps failing with the same status, and
its worker is retired: it takes no new episode and is killed once its other episodes end (at
once if it has none), so the next episodes run on a fresh worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, Self

from forge_agent.env.protocol import EnvFailure
from forge_agent.env.registry import EnvSpec
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.types import Message, SeatStart, Status, StepResult, ToolSpec

__all__ = ["EnvLease", "EnvPool", "EnvWorker"]

_HEADER = struct.Struct(">I")


class EnvWorker:
    """One env worker process serving up to `slots` env instances at once.

    Args:
        spec: what env to build (the resolved env's `EnvSpec`).
        env_kwargs: constructor arguments over the spec's defaults (must pickle).
        slots: env instances (episodes) it serves at once.
    """

    def __init__(
        self, spec: EnvSpec, env_kwargs: dict[str, Any] | None = None, slots: int = 1
    ) -> None:
        if slots < 1:
            raise ValueError(f"EnvWorker slots must be at least 1, got {slots}")
        self.spec = spec
        self.env_kwargs = dict(env_kwargs or {})
        self.slots = slots
        self.busy: set[int] = set()  # slots lent to episodes
        self.retired = False  # takes no new episode (one of its slots failed)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.Future[Any], str]] = {}
        self._slot_failure: dict[int, EnvFailure] = {}
        self.failure: EnvFailure | None = None  # set once the whole worker is unusable
        self.failure_reward = 0.0  # the env class's `failure_reward` (the worker's answer at start)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None and self.failure is None

    def free_slot(self) -> int | None:
        """A slot no episode holds, or None (also when the worker is retired or dead)."""
        if self.retired or not self.alive:
            return None
        return next((s for s in range(self.slots) if s not in self.busy), None)

    async def start(self, timeout_s: float = 60.0) -> None:
        """Start the process and hand it the env spec (envs are built at reset)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p) or env.get("PYTHONPATH", "")
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "forge_agent.env.worker_process",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group, killed as a whole
        )
        self._reader = asyncio.ensure_future(self._read_replies(self._proc))
        reward = await self._request(None, ("init", self.spec, self.env_kwargs), timeout_s, "start")
        self.failure_reward = float(reward or 0.0)

    async def reset(
        self, slot: int, task: dict[str, Any], seed: int | None, timeout_s: float
    ) -> tuple[list[Message], list[ToolSpec]] | SeatStart:
        reply = await self._request(slot, ("reset", task, seed), timeout_s, "reset")
        if isinstance(reply, SeatStart):  # a multi-seat env (forge_agent.env.SeatEnv)
            return reply
        messages, tools = reply
        return messages, tools

    async def step(self, slot: int, assistant_message: Message, timeout_s: float) -> StepResult:
        result = await self._request(slot, ("step", assistant_message), timeout_s, "step")
        return result

    async def close_env(self, slot: int, timeout_s: float) -> None:
        """Close the slot's env instance (the slot stays, ready for the next episode)."""
        await self._request(slot, ("close",), timeout_s, "close")

    def slot_failed(self, slot: int) -> bool:
        return slot in self._slot_failure or self.failure is not None

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
        self._fail_pending(self.failure)
        if self._reader is not None:
            self._reader.cancel()

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Ask the worker to close its envs and exit; kill it if it does not."""
        proc = self._proc
        if proc is not None and proc.returncode is None and proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.write(_frame(("exit",)))
                await proc.stdin.drain()
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), timeout_s)
        await self.kill()

    async def _request(
        self, slot: int | None, request: tuple[Any, ...], timeout_s: float, what: str
    ) -> Any:
        if slot is not None and slot in self._slot_failure:
            failure = self._slot_failure[slot]
            raise EnvFailure(failure.status, f"env instance is gone: {failure.message}")
        if self.failure is not None:
            raise EnvFailure(self.failure.status, f"env worker is gone: {self.failure.message}")
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise RuntimeError("EnvWorker.start() was not called")
        request_id = next(self._ids)
        try:
            frame = _frame((request_id, slot, *request))
        except Exception as exc:
            raise EnvFailure(Status.ENV_ERROR, f"could not send {what} request: {exc!r}") from exc
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (reply, what)
        try:
            proc.stdin.write(frame)
            await asyncio.wait_for(_sent_then(proc.stdin, reply), timeout_s)
        except TimeoutError:
            await self._fail_slot(
                slot,
                Status.POLICY_TIMEOUT if what == "step" else Status.ENV_TIMEOUT,
                f"env {self.spec.env_id!r} {what} did not finish within {timeout_s:g} s "
                f"(worker {proc.pid})",
            )
        except asyncio.CancelledError:
            # the slot may still be running the request: never reuse it
            self._mark_slot(slot, EnvFailure(Status.ENV_ERROR, f"{what} was cancelled"))
            raise
        except (ConnectionError, BrokenPipeError):
            await self._died(proc)
            assert self.failure is not None
            raise EnvFailure(self.failure.status, self.failure.message) from None
        finally:
            self._pending.pop(request_id, None)
            if reply.done() and not reply.cancelled():
                # a worker failing while this request was still being sent fails `reply` too,
                # which the paths above may never await: mark it seen, or asyncio logs it
                reply.exception()
        kind, value, *detail = reply.result()
        if kind == "error":
            # The env's state after an exception is unknown: never reuse this slot.
            text = f"env {self.spec.env_id!r} {what} raised {value}"
            blame = Status(detail[1]) if len(detail) > 1 else Status.ENV_ERROR
            await self._fail_slot(slot, blame, text)
        return value

    async def _read_replies(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while True:
                header = await proc.stdout.readexactly(_HEADER.size)
                (size,) = _HEADER.unpack(header)
                request_id, *reply = pickle.loads(await proc.stdout.readexactly(size))
                waiter = self._pending.get(request_id)
                if waiter is not None and not waiter[0].done():
                    waiter[0].set_result(reply)
        except asyncio.CancelledError:
            raise
        except Exception:  # pipe closed (or a frame that does not unpickle): the worker is gone
            await self._died(proc)

    async def _died(self, proc: asyncio.subprocess.Process) -> None:
        """The worker's pipe closed: every request in flight fails, naming how it ended."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 2.0)
        if self.failure is None:
            self.failure = EnvFailure(
                Status.ENV_ERROR,
                f"env {self.spec.env_id!r} worker {proc.pid} died ({_exit_text(proc.returncode)})",
            )
        self._fail_pending(self.failure)

    def _fail_pending(self, failure: EnvFailure) -> None:
        for waiter, what in list(self._pending.values()):
            if not waiter.done():
                message = failure.message.replace(" died (", f" died during {what} (", 1)
                waiter.set_exception(EnvFailure(failure.status, message))

    def _mark_slot(self, slot: int | None, failure: EnvFailure) -> None:
        self.retired = True
        if slot is None:
            self.failure = self.failure or failure
        else:
            self._slot_failure.setdefault(slot, failure)

    async def _fail_slot(self, slot: int | None, status: Status, message: str) -> None:
        failure = EnvFailure(status, message)
        self._mark_slot(slot, failure)
        if slot is None or not self.busy - {slot}:  # nothing else runs here: stop it now
            await self.kill()
        raise failure


async def _sent_then(stdin: asyncio.StreamWriter, reply: asyncio.Future[Any]) -> Any:
    await stdin.drain()
    return await asyncio.shield(reply)


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
    """One episode's env: an `AgentEnv` backed by one slot of a pooled worker. `close()`
    returns it."""

    def __init__(self, pool: EnvPool, worker: EnvWorker, slot: int) -> None:
        self._pool = pool
        self.worker = worker
        self.slot = slot
        self._closed = False

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        timeout_s = self._pool.env.reset_timeout_s
        return await self._guard(self.worker.reset(self.slot, task, seed, timeout_s))

    @property
    def failure_reward(self) -> float:
        """What an episode scores when the policy's message makes a step fail
        (`env.failure_reward`, else the env class's)."""
        configured = self._pool.env.failure_reward
        return self.worker.failure_reward if configured is None else configured

    async def step(self, assistant_message: Message) -> StepResult:
        timeout_s = self._pool.env.step_timeout_s
        try:
            return await self._guard(self.worker.step(self.slot, assistant_message, timeout_s))
        except EnvFailure as failure:
            failure.reward = self.failure_reward
            raise

    async def close(self) -> None:
        """End the episode: close the env instance and give the slot back to the pool."""
        if self._closed:
            return
        self._closed = True
        await self._pool._release(self.worker, self.slot)

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
    """Up to `size` env instances of one env on worker processes of `envs_per_worker` each,
    lent one per episode.

    Args:
        env: the run's `ResolvedEnv` (its spec, constructor kwargs (must pickle) and the
            deadlines of reset, step and close: `ENV_TIMEOUT` past them).
        size: the most env instances alive (and episodes running) at once.
        envs_per_worker: env instances one worker process serves at once (each on its own
            thread there); the pool runs `ceil(size / envs_per_worker)` workers.
    """

    def __init__(self, env: ResolvedEnv, size: int = 8, envs_per_worker: int = 1) -> None:
        if size < 1:
            raise ValueError(f"EnvPool size must be at least 1, got {size}")
        if envs_per_worker < 1:
            raise ValueError(f"EnvPool envs_per_worker must be at least 1, got {envs_per_worker}")
        self.env, self.spec = env.config, env.spec
        self.size = size
        self.envs_per_worker = min(envs_per_worker, size)
        self.num_workers = math.ceil(size / self.envs_per_worker)
        self._workers: list[EnvWorker] = []
        self._slots = asyncio.Semaphore(size)
        self._pick = asyncio.Lock()
        self._closed = False
        self.stats: dict[str, float] = {
            "workers_started": 0,
            "workers_replaced": 0,
            "env_timeouts": 0,
            "env_errors": 0,
            "policy_timeouts": 0,
            "policy_errors": 0,
            "worker_start_s": 0.0,
        }

    async def start(self) -> None:
        """Warm up: start all the pool's workers now instead of at first use."""
        async with self._pick:
            missing = self.num_workers - len(self._serving())
            started = await asyncio.gather(*(self._new_worker() for _ in range(missing)))
            self._workers.extend(started)

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[EnvLease]:
        """`async with pool.lease() as env:` one episode on one env instance."""
        env = await self.acquire()
        try:
            yield env
        finally:
            await env.close()

    async def acquire(self) -> EnvLease:
        """Wait for a free env instance (starting a worker if needed); `close()` the lease to
        return it."""
        if self._closed:
            raise RuntimeError("EnvPool is closed")
        await self._slots.acquire()
        try:
            async with self._pick:
                for dead in [w for w in self._workers if not w.alive and not w.busy]:
                    self._workers.remove(dead)  # died while idle
                    await dead.kill()
                # the least busy worker with a free slot: episodes spread over the processes
                open_ = [w for w in self._workers if w.free_slot() is not None]
                spread = len(self._serving()) < self.num_workers and all(w.busy for w in open_)
                if open_ and not spread:
                    worker = min(open_, key=lambda w: len(w.busy))
                else:
                    worker = await self._new_worker()
                    self._workers.append(worker)
                slot = worker.free_slot()
                assert slot is not None
                worker.busy.add(slot)
        except BaseException:
            self._slots.release()
            raise
        return EnvLease(self, worker, slot)

    async def close(self) -> None:
        """Stop every worker (busy ones too)."""
        self._closed = True
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _serving(self) -> list[EnvWorker]:
        return [w for w in self._workers if w.alive and not w.retired]

    async def _new_worker(self) -> EnvWorker:
        worker = EnvWorker(self.spec, dict(self.env.kwargs), slots=self.envs_per_worker)
        started = time.monotonic()
        try:
            await worker.start(self.env.reset_timeout_s)
        except EnvFailure as failure:
            self._count(failure.status)
            raise
        self.stats["workers_started"] += 1
        self.stats["worker_start_s"] += time.monotonic() - started
        return worker

    async def _release(self, worker: EnvWorker, slot: int) -> None:
        try:
            if not worker.slot_failed(slot):
                try:
                    await worker.close_env(slot, self.env.close_timeout_s)
                except EnvFailure as failure:
                    self._count(failure.status)
        finally:
            worker.busy.discard(slot)
            self._slots.release()
        if (worker.retired or not worker.alive) and not worker.busy:
            with contextlib.suppress(ValueError):
                self._workers.remove(worker)
            await worker.kill()
            if not self._closed:
                self.stats["workers_replaced"] += 1

    def _count(self, status: Status) -> None:
        self.stats[f"{status.value}s"] = self.stats.get(f"{status.value}s", 0) + 1

"""Services that outlive their actors: a dead or hung actor is replaced and the run goes on.

    gen = Service("generator0", spawn=lambda: spawn_generator(0), deadlines={"generate": 120})
    await gen.start()
    out = await gen.generate.call_one(prompt_ids, sampling, session)   # like the actor's own

A `Service` holds one actor (on its own proc mesh) and forwards endpoint calls to it, each
bounded by a deadline. When a call fails because the actor's process died (Monarch reports a
`SupervisionError`), or when it exceeds its deadline (a hang is a failure), the service kills
the proc mesh and every process under it (vLLM's engine processes included), spawns a fresh
one, runs the `on_restart` hook (give it the current weights, reload a checkpoint, ...) and
raises `ServiceRestarted` to the caller, whose work on the dead actor is lost and must be
marked (a `generator_error` episode) or retried. Concurrent failures of one actor restart it
once. Past `max_restarts` the service raises `ServiceFailed`, naming the service and each
cause, and the run stops with that error.

Monarch delivers an actor's death to the client as a supervision event, and by default exits
the client on one; `install_fault_hook` replaces that with a log line, since the failed calls
tell the owning service what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monarch.actor import MeshFailure, ProcMesh


logger = logging.getLogger(__name__)

SpawnFn = Callable[[], Awaitable[tuple[Any, Any]]]  # -> (proc mesh, actor mesh)
RestartHook = Callable[[Any], Awaitable[None]]


class ServiceRestarted(RuntimeError):
    """A call failed because its actor died or hung; the service has a fresh actor now."""

    def __init__(self, service: str, cause: str) -> None:
        super().__init__(f"{service} restarted: {cause}")
        self.service, self.cause = service, cause


class ServiceFailed(RuntimeError):
    """A service died more often than `max_restarts` allows: the run cannot go on."""

    def __init__(self, service: str, causes: list[str], max_restarts: int | None = None) -> None:
        listed = "; ".join(causes)
        limit = len(causes) - 1 if max_restarts is None else max_restarts
        if len(causes) > limit:
            why = f"more than supervision.max_restarts={limit} allows"
        else:
            why = "and its replacement could not start"
        super().__init__(f"{service} failed {len(causes)} times, {why}: {listed}")
        self.service, self.causes = service, causes


def is_actor_death(exc: BaseException) -> bool:
    """True when `exc` says the actor's process (or its mesh) is gone, not that the endpoint
    raised. Monarch raises `SupervisionError` for that (not exported by `monarch.actor`)."""
    return any(t.__name__ in ("SupervisionError", "MeshFailure") for t in type(exc).__mro__)


def install_fault_hook() -> None:
    """Log Monarch supervision events that reach the client instead of exiting on them.

    The services that own the actors see the failure in their calls and restart them; an
    actor nobody owns fails its next call with a `SupervisionError`, which is not swallowed.
    """
    import monarch.actor

    def log_failure(failure: MeshFailure) -> None:
        logger.warning("monarch supervision event: %s", str(failure).splitlines()[0])

    monarch.actor.unhandled_fault_hook = log_failure


def process_tree(pid: int) -> list[Any]:
    """`pid` and its descendants as psutil processes (empty when `pid` is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def kill_tree(procs: list[Any]) -> None:
    """SIGKILL processes recorded earlier (a stopped or hung process dies too); a pid that was
    reused since is left alone (psutil checks the creation time)."""
    import psutil

    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGKILL)


def _make_probe_class() -> type:
    from monarch.actor import Actor, endpoint

    class PidProbe(Actor):
        @endpoint
        async def pid(self) -> tuple[str, int]:
            return boot_id(), os.getpid()

    return PidProbe


_PROBE: type | None = None


def boot_id() -> str:
    """This machine's boot id: equal for every process of one machine (network namespaces
    included), different on another host, where a pid means some other process."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


async def proc_pids(procs: ProcMesh) -> list[int]:
    """The OS pids of a proc mesh's processes that run on this machine (a remote host's procs
    are stopped through Monarch, never by pid)."""
    global _PROBE
    if _PROBE is None:
        _PROBE = _make_probe_class()
    values = await procs.spawn("pid_probe", _PROBE).pid.call()
    here = boot_id()
    return [pid for _, (machine, pid) in values.items() if machine == here]


class _SupervisedEndpoint:
    def __init__(self, service: Service, name: str) -> None:
        self._service, self._name = service, name

    async def call_one(self, *args: Any, **kwargs: Any) -> Any:
        return await self._service.invoke(self._name, "call_one", args, kwargs)

    async def call(self, *args: Any, **kwargs: Any) -> Any:
        return await self._service.invoke(self._name, "call", args, kwargs)

    async def choose(self, *args: Any, **kwargs: Any) -> Any:
        return await self._service.invoke(self._name, "choose", args, kwargs)


class Service:
    """One supervised actor mesh (see the module docstring).

    Args:
        name: the service's name in logs, errors and the `restarts/<name>` counts.
        spawn: coroutine function returning a fresh (proc mesh, actor mesh); it must also run
            the actor's own setup.
        deadlines: seconds per endpoint name; others get `default_deadline_s`.
        on_restart: awaited with the new actor mesh after a restart, before calls resume.
        max_restarts: restarts allowed before `ServiceFailed`.
    """

    def __init__(
        self,
        name: str,
        spawn: SpawnFn,
        *,
        deadlines: dict[str, float] | None = None,
        default_deadline_s: float = 600.0,
        on_restart: RestartHook | None = None,
        max_restarts: int = 3,
        restart_timeout_s: float = 600.0,
    ) -> None:
        self.name = name
        self._spawn = spawn
        self.deadlines = dict(deadlines or {})
        self.default_deadline_s = default_deadline_s
        self.on_restart = on_restart
        self.max_restarts = max_restarts
        self.restart_timeout_s = restart_timeout_s
        self.procs: Any = None
        self.actor: Any = None
        self.generation = 0
        self.causes: list[str] = []
        self.mesh_pids: list[int] = []  # OS pids of the current mesh's procs (local meshes)
        self._tree: list[Any] = []
        self._lock = asyncio.Lock()
        self._failed: ServiceFailed | None = None

    async def start(self) -> Any:
        """Spawn the first actor; returns it."""
        self.procs, self.actor = await self._spawn()
        await self._record_tree()
        return self.actor

    @property
    def process_ids(self) -> list[int]:
        """Every OS process of the current mesh, children included (local meshes)."""
        return [p.pid for p in self._tree]

    @property
    def restarts(self) -> int:
        return len(self.causes)

    @property
    def failed(self) -> ServiceFailed | None:
        """Why the service is beyond recovery (None while it runs or can restart)."""
        return self._failed

    def __getattr__(self, name: str) -> _SupervisedEndpoint:
        if name.startswith("_"):
            raise AttributeError(name)
        return _SupervisedEndpoint(self, name)

    async def invoke(self, endpoint: str, how: str, args: tuple, kwargs: dict) -> Any:
        """Call `endpoint` on the current actor within its deadline; restart on death/hang."""
        if self._failed is not None:
            raise self._failed
        generation, actor = self.generation, self.actor
        deadline = self.deadlines.get(endpoint, self.default_deadline_s)
        try:
            return await asyncio.wait_for(
                getattr(getattr(actor, endpoint), how)(*args, **kwargs), deadline
            )
        except TimeoutError:
            cause = f"{endpoint}() exceeded its {deadline:g}s deadline (hung)"
        except Exception as exc:
            if not is_actor_death(exc):
                raise
            cause = f"{endpoint}() failed: its process died ({_first_line(exc)})"
        await self.restart(generation, cause)
        raise ServiceRestarted(self.name, cause)

    async def restart(self, generation: int, cause: str) -> None:
        """Replace the actor of `generation` (a no-op when another caller already did)."""
        async with self._lock:
            if self._failed is not None:
                raise self._failed
            if generation != self.generation:
                return
            self.causes.append(cause)
            if len(self.causes) > self.max_restarts:
                self._failed = ServiceFailed(self.name, self.causes)
                await self._kill()
                raise self._failed
            logger.warning("%s: %s; restarting it (restart %d)", self.name, cause, self.restarts)
            print(f"[restart] {self.name}: {cause}", flush=True)
            started = time.monotonic()
            await self._kill()
            try:
                self.procs, self.actor = await asyncio.wait_for(
                    self._spawn(), self.restart_timeout_s
                )
                await self._record_tree()
                if self.on_restart is not None:
                    await asyncio.wait_for(self.on_restart(self.actor), self.restart_timeout_s)
            except Exception as exc:
                self._failed = ServiceFailed(
                    self.name,
                    [*self.causes, f"its replacement failed to start: {exc}"],
                    self.max_restarts,
                )
                raise self._failed from exc
            self.generation += 1
            logger.warning("%s restarted in %.1fs", self.name, time.monotonic() - started)

    async def _record_tree(self) -> None:
        """Remember every OS process of the mesh (and their children, e.g. vLLM's engine
        core), so a restart can kill them even after their parent is gone."""
        with contextlib.suppress(Exception):
            self.mesh_pids = await asyncio.wait_for(proc_pids(self.procs), 60)
            self._tree = [p for pid in self.mesh_pids for p in process_tree(pid)]

    async def refresh_tree(self) -> None:
        """Re-read the process tree (call after setup started child processes)."""
        await self._record_tree()

    async def _kill(self) -> None:
        tree, self._tree = self._tree, []
        kill_tree(tree)
        if self.procs is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.procs.stop(), 10)

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the proc mesh, and kill whatever of it outlives `timeout_s`."""
        if self.procs is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.procs.stop(), timeout_s)
        kill_tree(self._tree)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


__all__ = [
    "Service",
    "ServiceFailed",
    "ServiceRestarted",
    "install_fault_hook",
    "is_actor_death",
    "kill_tree",
    "process_tree",
]

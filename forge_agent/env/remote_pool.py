"""Env workers on another host: an `EnvPool` inside a Monarch actor, leased from afar.

    actor = procs.spawn("env_pool", EnvPoolActor, EnvConfig("calculator"), workers=0)
    envs = await RemoteEnvs.start(actor)        # an `EnvSource` for the rollout engine
    env = await envs.acquire()                  # one episode: reset / step / close, each a call

With `hosts.services.env` naming a host mesh, the env workers (subprocesses serving several
envs each, sandboxes included) run on that host, started by the pool actor there; the rollout
engine stays in the controller and talks to each leased env through the actor (about 1 ms a
call). An env failure on the far side (timeout, crash) arrives as the same `EnvFailure`, so
the episode ends with the same status as with a local pool.
"""

from __future__ import annotations

import itertools
import os
import socket
from typing import Any

from monarch.actor import Actor, endpoint
from monarch.actor.concurrent import concurrent_endpoint

from forge_agent.env.pool import EnvLease, EnvPool
from forge_agent.env.protocol import EnvFailure
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.types import ActorMesh, Message, StepResult, ToolSpec


class EnvPoolActor(Actor):
    """Owns an `EnvPool` on its host; episodes are addressed by lease id.

    `workers` 0: `per_core` worker processes per core of the actor's host; each serves
    `envs_per_worker` env instances at once."""

    def __init__(
        self,
        env: ResolvedEnv,
        workers: int,
        per_core: int = 1,
        envs_per_worker: int = 1,
    ) -> None:
        workers = workers or per_core * len(os.sched_getaffinity(0))
        self.size = workers * envs_per_worker
        self.pool = EnvPool(env, size=self.size, envs_per_worker=envs_per_worker)
        self.leases: dict[int, EnvLease] = {}
        self._ids = itertools.count()

    @endpoint
    async def describe(self) -> dict[str, Any]:
        """The pool's size (env instances), its worker processes and the host it runs on."""
        return {
            "size": self.size,
            "num_workers": self.pool.num_workers,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
        }

    @concurrent_endpoint
    async def acquire(self) -> int | EnvFailure:
        try:
            lease = await self.pool.acquire()
        except EnvFailure as e:
            return e
        lease_id = next(self._ids)
        self.leases[lease_id] = lease
        return lease_id

    @concurrent_endpoint
    async def reset(
        self, lease_id: int, task: dict[str, Any], seed: int | None
    ) -> tuple[list[Message], list[ToolSpec]] | EnvFailure:
        try:
            return await self.leases[lease_id].reset(task, seed)
        except EnvFailure as e:
            return e

    @concurrent_endpoint
    async def step(self, lease_id: int, assistant_message: Message) -> StepResult | EnvFailure:
        try:
            return await self.leases[lease_id].step(assistant_message)
        except EnvFailure as e:
            return e

    @concurrent_endpoint
    async def release(self, lease_id: int) -> None:
        lease = self.leases.pop(lease_id, None)
        if lease is not None:
            await lease.close()

    @endpoint
    async def close(self) -> None:
        """Stop every env worker of the pool."""
        self.leases.clear()
        await self.pool.close()


def _raised(value: Any) -> Any:
    if isinstance(value, EnvFailure):  # returned, not raised: keeps its status across hosts
        raise value
    return value


class RemoteEnvLease:
    """One episode's env on the pool actor's host (the `EpisodeEnv` protocol)."""

    def __init__(self, actor: ActorMesh, lease_id: int) -> None:
        self.actor, self.lease_id = actor, lease_id
        self._closed = False

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        return _raised(await self.actor.reset.call_one(self.lease_id, task, seed))

    async def step(self, assistant_message: Message) -> StepResult:
        return _raised(await self.actor.step.call_one(self.lease_id, assistant_message))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.actor.release.call_one(self.lease_id)


class RemoteEnvs:
    """An `EnvSource` whose envs live in an `EnvPoolActor` (possibly on another host)."""

    def __init__(self, actor: ActorMesh, size: int, where: dict[str, Any]) -> None:
        self.actor, self.size, self.where = actor, size, where
        self.num_workers = int(where.get("num_workers", size))

    @classmethod
    async def start(cls, actor: ActorMesh) -> RemoteEnvs:
        where = await actor.describe.call_one()
        return cls(actor, where["size"], where)

    async def acquire(self) -> RemoteEnvLease:
        return RemoteEnvLease(self.actor, _raised(await self.actor.acquire.call_one()))

    async def close(self) -> None:
        await self.actor.close.call_one()


__all__ = ["EnvPoolActor", "RemoteEnvLease", "RemoteEnvs"]

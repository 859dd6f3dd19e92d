"""Weights across hosts: a `torch.distributed` broadcast between one relay per host.

    trainer ─put─► store@trainer host (shm) ─► relay rank 0 ══ broadcast (gloo/NCCL) ══► relay
    rank k ─► store@host k (shm) ─get─► generators on host k

`CrossHostWeightStore` keeps the versioned `put/get` API of `forge_agent.weights.store`. A put
writes the flat buffer into the trainer host's shared-memory store (the same-host path), then
relay rank 0 broadcasts that buffer, straight from shared memory, to the relays on the other
hosts, each of which receives it straight into a shared-memory slot of its own host's store
and commits the version there. So the bytes cross the network once per host, as one
collective over a real transport (not as a Monarch message), and each consumer reads its own
host's store: `store.for_host(name)` is the client to hand to the generators on host `name`.

Each relay is a Monarch actor in its own proc, so its process group (the default group of
that process) never meets the trainer's own (FSDP) group. `backend="gloo"` sends CPU buffers
over TCP; `backend="nccl"` stages each buffer through a GPU buffer (untested on the project's
CPU machines).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal

import torch
from monarch.actor import Actor, endpoint

from forge_agent.types import ActorMesh
from forge_agent.weights.layout import SharedView, StateDict, TensorMeta, layout
from forge_agent.weights.monarch_store import MonarchWeightStore
from forge_agent.weights.protocol import WeightStoreError, WeightStoreTimeoutError

Backend = Literal["gloo", "nccl"]


def interface_towards(address: str) -> tuple[str, str]:
    """(interface name, local IP) this machine uses to reach `address` (an IP or name)."""
    import psutil

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((address, 9))  # UDP connect sends nothing; it only picks the route
        local_ip = s.getsockname()[0]
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local_ip for a in addrs):
            return name, local_ip
    raise WeightStoreError(f"no network interface holds {local_ip} (the route to {address})")


class WeightRelayActor(Actor):
    """One per host. Rank 0 (the trainer's host) sends versions of its host's store; every
    other rank receives them into its own host's store. `setup` must run on all ranks at once
    (it joins the process group)."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        master_addr: str,
        master_port: int,
        store: MonarchWeightStore,
        backend: Backend = "gloo",
        timeout_s: float = 300.0,
    ) -> None:
        self.rank, self.world_size = rank, world_size
        self.master_addr, self.master_port = master_addr, master_port
        self.store, self.backend, self.timeout_s = store, backend, timeout_s
        self._maps: dict[str, torch.Tensor] = {}
        self._staging: torch.Tensor | None = None

    @endpoint
    async def setup(self) -> str:
        """Join the relay process group; returns this relay's interface and IP."""
        import torch.distributed as dist

        ifname, ip = interface_towards(self.master_addr)
        if self.backend == "gloo":
            os.environ["GLOO_SOCKET_IFNAME"] = ifname  # this proc only: the relay's own process
        else:
            os.environ["NCCL_SOCKET_IFNAME"] = ifname
        await asyncio.to_thread(
            dist.init_process_group,
            self.backend,
            init_method=f"tcp://{self.master_addr}:{self.master_port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=self.timeout_s),
        )
        return f"{ifname} {ip}"

    def _map(self, path: str, nbytes: int) -> torch.Tensor:
        buf = self._maps.get(path)
        if buf is None or buf.numel() < nbytes:
            buf = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
            self._maps[path] = buf
            while len(self._maps) > 4:
                self._maps.pop(next(iter(self._maps)))
        return buf[:nbytes]

    def _broadcast(self, buf: torch.Tensor) -> None:
        import torch.distributed as dist

        if self.backend == "gloo":
            dist.broadcast(buf, src=0)
            return
        if self._staging is None or self._staging.numel() < buf.numel():
            self._staging = torch.empty(buf.numel(), dtype=torch.uint8, device="cuda")
        staged = self._staging[: buf.numel()]
        if self.rank == 0:
            staged.copy_(buf)
        dist.broadcast(staged, src=0)
        if self.rank != 0:
            buf.copy_(staged)
        torch.cuda.synchronize()

    @endpoint
    async def send(self, version: int) -> float:
        """Rank 0: broadcast `version` from this host's store; returns the broadcast's
        seconds."""
        _, entry = await self.store.actor.get.call_one(version)
        if entry.slot is None:
            raise WeightStoreError("the trainer host's store must use shared memory")
        buf = self._map(entry.slot.path, entry.nbytes)
        started = time.perf_counter()
        await asyncio.to_thread(self._broadcast, buf)
        return time.perf_counter() - started

    @endpoint
    async def receive(self, version: int, metas: list[TensorMeta], nbytes: int) -> None:
        """Rank > 0: receive `version` into a shared-memory slot of this host's store."""
        slot = await self.store.actor.reserve.call_one(nbytes)
        try:
            await asyncio.to_thread(self._broadcast, self._map(slot.path, nbytes))
        except BaseException:
            await self.store.actor.release.call_one(slot.path)
            raise
        if not await self.store.actor.commit.call_one(version, metas, nbytes, slot.path):
            await self.store.actor.release.call_one(slot.path)
            raise WeightStoreError(f"host store full: version {version} not committed")

    @endpoint
    async def close(self) -> None:
        import torch.distributed as dist

        self._maps.clear()
        if dist.is_initialized():
            dist.destroy_process_group()


class CrossHostWeightStore:
    """Versioned store whose versions reach every host of the run (see module docstring).

    `put` (trainer host only) stores the version on the trainer's host and broadcasts it to the
    others; `get` and `shared_view` read the caller's own host's store; `versions` is the
    trainer host's; `drop` acts on all. Picklable: hand it to the trainer and generators."""

    def __init__(
        self,
        home: MonarchWeightStore,
        hosts: dict[str, MonarchWeightStore],
        sender: ActorMesh,
        receivers: list[ActorMesh],
        put_timeout_s: float = 300.0,
    ) -> None:
        self.home, self.hosts = home, hosts
        self.sender, self.receivers = sender, receivers
        self.put_timeout_s = put_timeout_s
        self._local: MonarchWeightStore | None = None
        self.last_put: dict[str, float] = {}

    @classmethod
    async def spawn(
        cls,
        home: tuple[str, Any],
        others: Mapping[str, Any],
        master_addr: str,
        backend: Backend = "gloo",
        max_versions: int | None = 2,
        put_timeout_s: float = 300.0,
    ) -> CrossHostWeightStore:
        """Spawn a store and a relay on each host. `home` is (name, one-proc mesh) on the
        trainer's host; `others` maps each other host's name to a one-proc mesh there;
        `master_addr` is the trainer host's address the other hosts can reach."""
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"weights.backend {backend!r}: expected 'gloo' or 'nccl'")
        meshes = {home[0]: home[1], **others}
        stores = {
            name: await MonarchWeightStore.spawn(
                procs, name="weight_store", transport="shm", max_versions=max_versions
            )
            for name, procs in meshes.items()
        }
        port = await _free_port_on(home[1], master_addr)
        relays = [
            procs.spawn(
                "weight_relay",
                WeightRelayActor,
                rank,
                len(meshes),
                master_addr,
                port,
                stores[name],
                backend,
                put_timeout_s,
            )
            for rank, (name, procs) in enumerate(meshes.items())
        ]
        await asyncio.wait_for(asyncio.gather(*(r.setup.call_one() for r in relays)), put_timeout_s)
        return cls(stores[home[0]], stores, relays[0], relays[1:], put_timeout_s)

    def for_host(self, name: str) -> MonarchWeightStore:
        """The store consumers on host `name` read (same-host shared memory)."""
        if name not in self.hosts:
            raise KeyError(f"no weight store on host {name!r}; hosts: {sorted(self.hosts)}")
        return self.hosts[name]

    async def put(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Store `version` on the trainer's host, then broadcast it to every other host
        (`last_put`: the seconds of each part)."""
        started = time.perf_counter()
        await self.home.put(version, state_dict)
        self.last_put = {"home_s": time.perf_counter() - started}
        if not self.receivers:
            return
        metas, nbytes = layout(state_dict)
        names = list(self.hosts)  # relay order: the trainer's host first
        calls = {names[0]: self.sender.send.call_one(version)}
        for name, relay in zip(names[1:], self.receivers, strict=True):
            calls[name] = relay.receive.call_one(version, metas, nbytes)
        tasks = {asyncio.ensure_future(_awaited(c)): name for name, c in calls.items()}
        done, pending = await asyncio.wait(
            tasks, timeout=self.put_timeout_s, return_when=asyncio.FIRST_EXCEPTION
        )
        for t in pending:
            t.cancel()
        failed = {tasks[t]: t.exception() for t in done if t.exception() is not None}
        if failed:
            host, exc = next(iter(failed.items()))
            raise WeightStoreError(
                f"cross-host put(version={version}) failed on host {host!r}: {exc}"
            ) from exc
        if not pending:
            self.last_put["broadcast_s"] = next(t for t in done if tasks[t] == names[0]).result()
        if pending:
            raise WeightStoreTimeoutError(
                f"cross-host put(version={version}) did not finish within {self.put_timeout_s}s"
                f" on hosts {sorted(tasks[t] for t in pending)}"
            )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_local": None}

    async def local(self) -> MonarchWeightStore:
        """The store on the caller's host (found by hostname: each host's store reads and
        writes its own host's shared memory); `WeightStoreError` on a host without one."""
        if self._local is None:
            here = socket.gethostname()
            for store in self.hosts.values():
                host, _, _ = await store.actor.host.call_one()
                if host == here:
                    self._local = store
                    break
            else:
                raise WeightStoreError(
                    f"no weight store on host {here!r}: the run's stores are on hosts "
                    f"{sorted(self.hosts)} (the trainer's and the generators')"
                )
        return self._local

    async def get(
        self, version: int | None = None, into: Mapping[str, torch.Tensor] | None = None
    ) -> StateDict:
        """`version` (latest when None) from the caller's host's store."""
        return await (await self.local()).get(version, into)

    async def shared_view(self, version: int | None = None) -> SharedView | None:
        """Where `version` lies in the caller's host's shared memory (a generator's in-place
        reload reads it there)."""
        return await (await self.local()).shared_view(version)

    async def versions(self) -> list[int]:
        return await self.home.versions()

    async def latest_version(self) -> int | None:
        return await self.home.latest_version()

    async def drop(self, version: int) -> None:
        await asyncio.gather(*(s.drop(version) for s in self.hosts.values()))

    async def close(self) -> None:
        """Leave the process group and delete every host's shared-memory buffers."""
        for relay in [self.sender, *self.receivers]:
            await relay.close.call_one()
        for store in self.hosts.values():
            await store.close()


async def _awaited(call: Any) -> Any:
    return await call


class _PortPicker(Actor):
    @endpoint
    async def free_port(self, address: str) -> int:
        with socket.socket() as s:
            s.bind((address, 0))
            return s.getsockname()[1]


async def _free_port_on(procs: Any, address: str) -> int:
    """A free TCP port at `address` on the host of `procs` (the relay group's rendezvous)."""
    return await procs.spawn("port_picker", _PortPicker).free_port.call_one(address)


__all__ = ["CrossHostWeightStore", "WeightRelayActor", "interface_towards"]

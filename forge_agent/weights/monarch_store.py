"""The Monarch weight store (`weight_store.backend=monarch`, the default): a `WeightStoreActor`
owns the versions, and `MonarchWeightStore` is its picklable client. Each put is one flat
contiguous byte buffer plus a small table of tensor metadata: in shared memory when the actor
runs on the putting host ("shm"), one Monarch message across hosts ("message"), or a slot of
the trainer's device memory when colocated on one GPU ("device", `weights/device_slots.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from monarch.actor import Actor, endpoint

from forge_agent.lazy import LazyModule
from forge_agent.types import ActorMesh
from forge_agent.weights.config import OnFull
from forge_agent.weights.device_slots import (
    DeviceSlots,
    DeviceView,
    HostLocks,
    open_slot,
)
from forge_agent.weights.layout import (
    SharedView,
    StateDict,
    TensorMeta,
    layout,
    meta_table,
    pack_into,
    unpack,
)
from forge_agent.weights.protocol import (
    VersionedPuts,
    WeightStoreError,
    materialize,
    wait_for_room,
)

if TYPE_CHECKING:
    from monarch.actor import ProcMesh

# imported on first use (`LazyModule`): the driver hosts the store's actor, no tensor
torch = LazyModule("torch")

__all__ = ["MonarchWeightStore", "WeightStoreActor"]


@dataclass(frozen=True)
class _ShmSlot:
    path: str
    nbytes: int


@dataclass
class _Entry:
    metas: list[TensorMeta]
    nbytes: int
    slot: _ShmSlot | None = None  # shm transport
    data: torch.Tensor | None = None  # message transport
    device: bytes | None = None  # device transport: the slot's handle (`DeviceSlots`)


class WeightStoreActor(Actor):
    """Owns the stored versions. Shared-memory slots live in `shm_dir` and are recycled;
    message-transport versions live in this process's memory."""

    def __init__(
        self, max_versions: int | None = 2, on_full: OnFull = "evict", shm_dir: str = "/dev/shm"
    ) -> None:
        self.max_versions, self.on_full, self.shm_dir = max_versions, on_full, shm_dir
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._free: list[_ShmSlot] = []
        self._reserved: dict[str, _ShmSlot] = {}
        self._prefix = f"forge_ws_{os.getpid()}_{uuid.uuid4().hex[:8]}"

    @endpoint
    async def host(self) -> tuple[str, str, bool]:
        """(hostname, shm_dir, shm_dir usable) so a client can pick its transport."""
        usable = os.path.isdir(self.shm_dir) and os.access(self.shm_dir, os.W_OK)
        return socket.gethostname(), self.shm_dir, usable

    @endpoint
    async def versions(self) -> list[int]:
        return sorted(self._entries)

    def _has_room(self, version: int) -> bool:
        if self.max_versions is None or version in self._entries:
            return True
        if self.on_full == "evict":
            while len(self._entries) >= self.max_versions:
                self._drop(min(self._entries))
        return len(self._entries) < self.max_versions

    @endpoint
    async def reserve(self, nbytes: int) -> _ShmSlot:
        """A shared-memory slot of at least `nbytes` for the caller to fill, then `commit`."""
        for i, slot in enumerate(self._free):
            if slot.nbytes >= nbytes:
                slot = self._free.pop(i)
                break
        else:
            path = os.path.join(self.shm_dir, f"{self._prefix}_{uuid.uuid4().hex[:8]}")
            fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, nbytes)
            finally:
                os.close(fd)
            slot = _ShmSlot(path, nbytes)
        self._reserved[slot.path] = slot
        return slot

    @endpoint
    async def commit(self, version: int, metas: list[TensorMeta], nbytes: int, path: str) -> bool:
        """Publish a filled slot as `version`; False (slot kept reserved) when full."""
        if not self._has_room(version):
            return False
        slot = self._reserved.pop(path)
        self._drop(version)
        self._entries[version] = _Entry(metas, nbytes, slot=slot)
        return True

    @endpoint
    async def release(self, path: str) -> None:
        """Give back a reserved slot that will not be committed (put gave up)."""
        slot = self._reserved.pop(path, None)
        if slot is not None:
            self._recycle(slot)

    @endpoint
    async def make_room(self, version: int) -> list[int] | None:
        """Room for `version` (evicting the oldest when `on_full="evict"`): the versions kept,
        or None when full. The device transport reuses the slots of versions not kept."""
        return sorted(self._entries) if self._has_room(version) else None

    @endpoint
    async def commit_device(self, version: int, metas: list, nbytes: int, handle: bytes) -> bool:
        """Publish a version packed into a slot of the trainer's device memory; False: full."""
        if not self._has_room(version):
            return False
        self._drop(version)
        self._entries[version] = _Entry(metas, nbytes, device=handle)
        return True

    @endpoint
    async def put_message(self, version: int, metas: list[TensorMeta], data: torch.Tensor) -> bool:
        """Store a version sent as one flat uint8 tensor; False when full."""
        if not self._has_room(version):
            return False
        self._drop(version)
        self._entries[version] = _Entry(metas, data.numel(), data=data)
        return True

    @endpoint
    async def get(self, version: int | None) -> tuple[int, _Entry]:
        v = max(self._entries) if version is None and self._entries else version
        if v not in self._entries:
            raise WeightStoreError(f"version {version} not in store (have {sorted(self._entries)})")
        return v, self._entries[v]

    @endpoint
    async def drop(self, version: int) -> None:
        self._drop(version)

    @endpoint
    async def close(self) -> None:
        """Delete every shared-memory file this store created."""
        for v in list(self._entries):
            self._drop(v)
        for slot in [*self._free, *self._reserved.values()]:
            _unlink(slot.path)
        self._free, self._reserved = [], {}

    def _drop(self, version: int) -> None:
        entry = self._entries.pop(version, None)
        if entry is not None and entry.slot is not None:
            self._recycle(entry.slot)

    def _recycle(self, slot: _ShmSlot) -> None:
        self._free.append(slot)
        keep = (self.max_versions or 2) + 1
        while len(self._free) > keep:
            _unlink(self._free.pop(0).path)

    def __del__(self) -> None:
        for slot in [*self._free, *self._reserved.values()]:
            _unlink(slot.path)
        for e in self._entries.values():
            if e.slot is not None:
                _unlink(e.slot.path)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class MonarchWeightStore(VersionedPuts):
    """Client of a `WeightStoreActor` (picklable: it can be handed to trainer and generator
    actors). `transport="auto"` uses shared memory when the store runs on this host;
    `"device"` (colocated on one GPU) slots in the putting process's device memory."""

    def __init__(
        self,
        actor: ActorMesh,
        transport: Literal["auto", "shm", "message", "device"] = "auto",
        max_versions: int | None = 2,
        on_full: OnFull = "evict",
        put_timeout_s: float = 60.0,
    ) -> None:
        self.actor, self.transport = actor, transport
        self.max_versions, self.on_full, self.put_timeout_s = max_versions, on_full, put_timeout_s
        self._maps: OrderedDict[str, torch.Tensor] = OrderedDict()  # path -> mapped buffer
        self._resolved: str | None = None
        self._slots: DeviceSlots | None = None  # the device transport's, in the putting process
        self._locks = HostLocks()  # shm slots page-locked for a GPU trainer's copies

    @classmethod
    async def spawn(
        cls, procs: ProcMesh, name: str = "weight_store", **kwargs: Any
    ) -> MonarchWeightStore:
        """Spawn a `WeightStoreActor` on `procs` (a one-proc mesh) and return its client."""
        actor_kwargs = {k: kwargs[k] for k in ("max_versions", "on_full") if k in kwargs}
        actor = procs.spawn(name, WeightStoreActor, **actor_kwargs)
        store = cls(actor, **kwargs)
        await store._transport()
        return store

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "_maps": OrderedDict(), "_resolved": None, "_slots": None}
        return {**state, "_locks": HostLocks()}

    async def _transport(self) -> str:
        if self._resolved is None:
            if self.transport != "auto":
                self._resolved = self.transport
            else:
                host, shm_dir, usable = await self.actor.host.call_one()
                same = host == socket.gethostname() and os.path.isdir(shm_dir)
                self._resolved = "shm" if same and usable else "message"
        return self._resolved

    def _map(self, slot: _ShmSlot) -> torch.Tensor:
        buf = self._maps.pop(slot.path, None)
        if buf is None or buf.numel() < slot.nbytes:
            self._locks.release(slot.path)  # its old mapping goes
            buf = torch.from_file(slot.path, shared=True, size=slot.nbytes, dtype=torch.uint8)
        self._maps[slot.path] = buf
        while len(self._maps) > (self.max_versions or 2) + 2:
            self._locks.release(self._maps.popitem(last=False)[0])
        return buf

    async def versions(self) -> list[int]:
        return await self.actor.versions.call_one()

    async def _put(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        deadline = time.monotonic() + self.put_timeout_s
        metas, nbytes = layout(state_dict)
        if self.on_full == "block":
            await wait_for_room(self.versions, self.max_versions, deadline, f"put({version})")
        transport = await self._transport()
        if transport == "device":
            await self._put_device(version, state_dict, metas, nbytes, deadline)
        elif transport == "shm":
            slot = await self.actor.reserve.call_one(nbytes)
            try:
                buf = self._map(slot)
                self._locks.lock(slot.path, buf, state_dict)  # a GPU trainer's: pinned copies
                await asyncio.to_thread(pack_into, state_dict, metas, buf)
                while not await self.actor.commit.call_one(version, metas, nbytes, slot.path):
                    await wait_for_room(
                        self.versions, self.max_versions, deadline, f"put({version})"
                    )
            except BaseException:
                await self.actor.release.call_one(slot.path)
                raise
        else:
            buf = torch.empty(nbytes, dtype=torch.uint8)
            await asyncio.to_thread(pack_into, state_dict, metas, buf)
            while not await self.actor.put_message.call_one(version, metas, buf):
                await wait_for_room(self.versions, self.max_versions, deadline, f"put({version})")

    async def _put_device(
        self, version: int, state_dict: Mapping[str, torch.Tensor], metas, nbytes, deadline
    ) -> None:
        """Pack `state_dict` into a slot on its own device and publish the slot's handle."""
        while (kept := await self.actor.make_room.call_one(version)) is None:
            await wait_for_room(self.versions, self.max_versions, deadline, f"put({version})")
        if self._slots is None:
            self._slots = DeviceSlots(self.max_versions or 2)
        pack = self._slots.pack
        _, handle = await asyncio.to_thread(pack, state_dict, metas, nbytes, version, set(kept))
        while not await self.actor.commit_device.call_one(version, metas, nbytes, handle):
            await wait_for_room(self.versions, self.max_versions, deadline, f"put({version})")

    async def get(
        self, version: int | None = None, into: Mapping[str, torch.Tensor] | None = None
    ) -> StateDict:
        """Fetch `version` (latest when None): copied into `into`'s tensors in place when
        given (the fast path: no allocation), else into fresh tensors."""
        v, entry = await self.actor.get.call_one(version)
        if entry.device is not None:
            buf = open_slot(entry.device)[: entry.nbytes]
        elif entry.slot is not None:
            buf = self._map(entry.slot)[: entry.nbytes]
        else:
            buf = entry.data
        return await asyncio.to_thread(materialize, unpack(entry.metas, buf), into, v)

    async def shared_view(self, version: int | None = None) -> SharedView | None:
        """Where `version` (latest when None) lies in shared memory, for a reader on this host
        to map and read in place (no copy here); None when the store is not on this host."""
        if await self._transport() != "shm":
            return None
        v, entry = await self.actor.get.call_one(version)
        if entry.slot is None:
            return None
        return SharedView(v, entry.slot.path, entry.nbytes, meta_table(entry.metas))

    async def device_view(self, version: int | None = None) -> DeviceView | None:
        """`version` (latest when None) as a slot of the trainer's device memory, for vLLM's
        worker on the same GPU to open in place; None unless the device transport put it."""
        if await self._transport() != "device":
            return None
        v, entry = await self.actor.get.call_one(version)
        if entry.device is None:
            return None
        return DeviceView(v, entry.device, entry.nbytes, meta_table(entry.metas))

    async def drop(self, version: int) -> None:
        await self.actor.drop.call_one(version)

    async def close(self) -> None:
        self._locks.release_all()
        self._maps.clear()
        await self.actor.close.call_one()
        if self._slots is not None:
            self._slots.close()

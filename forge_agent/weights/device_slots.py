"""Weight-store slots in the trainer's device memory, for a trainer and a generator colocated on
one GPU (`services.colocate`; the weight store's "device" transport).

A version is packed into one flat buffer on the trainer's device (a device-to-device copy, so a
stored version is a snapshot the next optimizer step does not change), and only a handle to the
buffer travels: a CUDA IPC handle, which vLLM's worker on the same GPU opens in place. The
weights never cross host memory on their way from the trainer's parameters to vLLM's.

The slots belong to the process that allocated them (device memory does), so the trainer-side
`DeviceSlots` owns and recycles them: a version's slot is reused once the store no longer holds
that version. At most `max_versions` slots live at once.

On a machine without CUDA the same path runs with a named stand-in: tensors on the CPU get a
slot in host shared memory (`/dev/shm`), and the handle is its file. Everything else (the pack,
the store's table of versions, the generator's and vLLM worker's reads) is the code a GPU runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from forge_agent.lazy import LazyModule
from forge_agent.weights.layout import pack_into
from forge_agent.weights.protocol import WeightStoreError

# imported on first use (`LazyModule`): the driver hosts the store's actor, no tensor
torch = LazyModule("torch")

logger = logging.getLogger(__name__)
_PREFIX = "forge_ds_"
_OPENED_HERE: dict[str, torch.Tensor] = {}
"""This process's own slots by id: a CUDA IPC handle cannot be opened by the process that made
it, so a reader in the trainer's own process gets the buffer itself."""


@dataclass(frozen=True)
class DeviceView:
    """A stored version's slot, as plain data (it crosses RPC boundaries): the slot's handle
    (`DeviceSlots` makes it, `open_slot` opens it), its used bytes and each tensor's (name,
    dtype, shape, offset, nbytes), as `SharedView` writes them."""

    version: int
    handle: bytes
    nbytes: int
    metas: list[tuple[str, str, list[int], int, int]]


def device_of(state_dict: dict[str, torch.Tensor]) -> torch.device:
    """The one device all of `state_dict`'s tensors are on (a `WeightStoreError` naming the
    devices otherwise)."""
    devices = {v.device for v in state_dict.values()}
    if len(devices) != 1:
        raise WeightStoreError(
            f"the device transport packs a state dict on one device; this one spans {devices}"
        )
    return devices.pop()


@dataclass
class _Slot:
    id: str
    buf: torch.Tensor
    handle: bytes
    version: int | None = None
    path: str | None = None  # the host stand-in's file


class DeviceSlots:
    """The trainer's side: flat buffers on its device, each with a handle others can open."""

    def __init__(self, max_slots: int, shm_dir: str = "/dev/shm") -> None:
        self.max_slots, self.shm_dir = max_slots, shm_dir
        self._slots: list[_Slot] = []
        _remove_stand_ins_of_dead_processes(shm_dir)

    def slot_for(
        self, version: int, nbytes: int, device: torch.device, kept: set[int]
    ) -> tuple[torch.Tensor, bytes]:
        """A buffer of at least `nbytes` on `device` for `version`, and its handle: a slot whose
        version the store no longer holds (not in `kept`), or a new one."""
        free = [s for s in self._slots if s.version not in kept]
        fits = [s for s in free if s.buf.device == device and s.buf.numel() >= nbytes]
        if fits:
            slot = fits[0]
        else:
            if free and len(self._slots) >= self.max_slots:
                self._release(free[0])
            slot = self._new(nbytes, device)
        slot.version = version
        return slot.buf, slot.handle

    def pack(
        self,
        state_dict: Mapping[str, torch.Tensor],
        metas: list,
        nbytes: int,
        version: int,
        kept: set[int],
        device: torch.device | None = None,
    ) -> tuple[torch.Tensor, bytes]:
        """`state_dict` packed (`layout.pack_into`, `metas` and `nbytes` from `layout.layout`)
        into a slot for `version` on `device` (default: the state dict's own), finished on the
        GPU before this returns, so a reader may open it: the slot's buffer and handle."""
        device = device_of(dict(state_dict)) if device is None else device
        buf, handle = self.slot_for(version, nbytes, device, kept)
        pack_into(state_dict, metas, buf)
        on_gpu = [v.device for v in state_dict.values() if v.is_cuda]
        if on_gpu:
            torch.cuda.synchronize(on_gpu[0])  # the copies are done before a reader opens it
        return buf, handle

    def _new(self, nbytes: int, device: torch.device) -> _Slot:
        slot_id = f"{_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
        if device.type == "cuda":
            from torch.multiprocessing.reductions import reduce_tensor

            buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
            rebuild, args = reduce_tensor(buf)
            slot = _Slot(slot_id, buf, pickle.dumps(("cuda", slot_id, rebuild, args)))
        elif device.type == "cpu":  # the stand-in: host shared memory
            path = os.path.join(self.shm_dir, slot_id)
            buf = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
            slot = _Slot(slot_id, buf, pickle.dumps(("host", slot_id, path, nbytes)), path=path)
        else:
            raise WeightStoreError(f"the device transport has no slots on {device.type} devices")
        _OPENED_HERE[slot_id] = buf
        self._slots.append(slot)
        return slot

    def _release(self, slot: _Slot) -> None:
        self._slots.remove(slot)
        _OPENED_HERE.pop(slot.id, None)
        if slot.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(slot.path)

    def close(self) -> None:
        """Free every slot (the store's versions in them cannot be read afterwards)."""
        for slot in list(self._slots):
            self._release(slot)

    def __del__(self) -> None:
        self.close()


def open_slot(handle: bytes) -> torch.Tensor:
    """The flat buffer behind a `DeviceSlots` handle, opened in place (no copy): a CUDA IPC
    handle on this process's current device (the one GPU both processes see), the stand-in's
    file mapped, or, in the process that made it, the buffer itself."""
    kind, slot_id, *rest = pickle.loads(handle)
    if slot_id in _OPENED_HERE:
        return _OPENED_HERE[slot_id]
    if kind == "host":
        path, nbytes = rest
        return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    return open_cuda_handle(*rest)


def open_cuda_handle(rebuild: Callable[..., torch.Tensor], args: tuple) -> torch.Tensor:
    """A tensor shared by CUDA IPC (`torch.multiprocessing.reductions.reduce_tensor`'s
    `(rebuild, args)`), opened on this process's current device: the one GPU both processes
    see, whatever index each gives it."""
    opened: list[Any] = list(args)
    opened[6] = torch.cuda.current_device()  # rebuild_cuda_tensor's device index
    return rebuild(*opened)


def _remove_stand_ins_of_dead_processes(shm_dir: str) -> None:
    """Unlink host stand-in slots whose process is gone (a trainer killed before it could
    free them; a dead process's GPU memory the driver frees, its files nobody would)."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(shm_dir):
            pid = name[len(_PREFIX) :].split("_")[0]
            if name.startswith(_PREFIX) and pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(shm_dir, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class HostLocks:
    """Host buffers page-locked in place for copies from a GPU (`cudaHostRegister`), by key
    (a store slot's file): a trainer's device-to-host copies into the store's shared memory
    then run at pinned-memory speed with no staging copy (40.7 against 12.9 GB/s for the
    per-tensor pack on an H200, docs/gpu.md). Locking costs about 0.6 s per 1.5 GB slot, once
    (the store reuses its slots); a buffer must be released before it is unmapped. Where the
    driver refuses, copies stay pageable (logged once)."""

    def __init__(self) -> None:
        self._locked: dict[str, int | None] = {}  # key -> registered pointer (None: refused)

    def lock(self, key: str, buf: torch.Tensor, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Page-lock `buf` unless done, or unless nothing in `state_dict` is on a GPU."""
        if key in self._locked or not any(v.is_cuda for v in state_dict.values()):
            return
        code = torch.cuda.cudart().cudaHostRegister(buf.data_ptr(), buf.numel() * buf.itemsize, 0)
        self._locked[key] = buf.data_ptr() if int(code) == 0 else None
        if int(code) != 0 and not any(v is None for k, v in self._locked.items() if k != key):
            logger.warning("cudaHostRegister refused (%s): weight copies stay pageable", code)

    def release(self, key: str) -> None:
        if (ptr := self._locked.pop(key, None)) is not None:
            torch.cuda.cudart().cudaHostUnregister(ptr)

    def release_all(self) -> None:
        for key in list(self._locked):
            self.release(key)

"""The in-process weight store (`weight_store.backend=local`): one event loop, for tests and
single-process runs. `put` copies into a recycled flat buffer, so later changes to the
trainer's tensors do not leak into stored versions."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping

import torch

from forge_agent.weights.config import OnFull
from forge_agent.weights.layout import StateDict, TensorMeta, layout, pack_into, unpack
from forge_agent.weights.protocol import (
    WeightStoreError,
    check_version,
    materialize,
    wait_for_room,
)

__all__ = ["LocalWeightStore"]


class LocalWeightStore:
    """In-process versioned store. `put` copies into a (recycled) flat buffer, so later
    changes to the trainer's tensors do not leak into stored versions."""

    def __init__(
        self, max_versions: int | None = 2, on_full: OnFull = "evict", put_timeout_s: float = 60.0
    ) -> None:
        if max_versions is not None and max_versions < 1:
            raise ValueError(f"max_versions must be >= 1 or None, got {max_versions}")
        self.max_versions, self.on_full, self.put_timeout_s = max_versions, on_full, put_timeout_s
        self._data: OrderedDict[int, tuple[list[TensorMeta], torch.Tensor]] = OrderedDict()
        self._free: list[torch.Tensor] = []

    async def versions(self) -> list[int]:
        return sorted(self._data)

    async def latest_version(self) -> int | None:
        return max(self._data) if self._data else None

    def _buffer(self, nbytes: int) -> torch.Tensor:
        for i, b in enumerate(self._free):
            if b.numel() >= nbytes:
                return self._free.pop(i)[:nbytes]
        return torch.empty(nbytes, dtype=torch.uint8)

    async def put(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        check_version(version)
        deadline = time.monotonic() + self.put_timeout_s
        if version not in self._data and self.max_versions is not None:
            if self.on_full == "evict":
                while len(self._data) >= self.max_versions:
                    await self.drop(min(self._data))
            else:
                await wait_for_room(self.versions, self.max_versions, deadline, f"put({version})")
        metas, nbytes = layout(state_dict)
        buf = self._buffer(nbytes)
        pack_into(state_dict, metas, buf)
        if version in self._data:
            await self.drop(version)
        self._data[version] = (metas, buf)

    async def get(
        self, version: int | None = None, into: Mapping[str, torch.Tensor] | None = None
    ) -> StateDict:
        v = await self.latest_version() if version is None else version
        if v is None or v not in self._data:
            raise WeightStoreError(f"version {version} not in store (have {sorted(self._data)})")
        metas, buf = self._data[v]
        return materialize(unpack(metas, buf), into, v)

    async def drop(self, version: int) -> None:
        item = self._data.pop(version, None)
        if item is not None:
            self._free = [item[1], *self._free][:2]

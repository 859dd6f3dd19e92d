"""The weight store's contract: the `WeightStore` protocol every backend meets (`store.py`'s
local and Monarch stores, `torchstore_store.py`), its errors, and the checks the backends share
(a policy version's type, waiting for room in a full store with `on_full="block"`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Protocol

import torch

from forge_agent.weights.layout import StateDict

__all__ = [
    "WeightStore",
    "WeightStoreError",
    "WeightStoreTimeoutError",
    "check_version",
    "wait_for_room",
]


class WeightStoreError(RuntimeError):
    """A weight-store operation failed (unknown version, bad state dict, ...)."""


class WeightStoreTimeoutError(WeightStoreError, TimeoutError):
    """A put could not complete within the configured timeout."""


class WeightStore(Protocol):
    """Versioned state dicts; all methods are coroutines."""

    async def put(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None: ...

    async def get(
        self, version: int | None = None, into: Mapping[str, torch.Tensor] | None = None
    ) -> StateDict: ...

    async def drop(self, version: int) -> None: ...

    async def latest_version(self) -> int | None: ...

    async def versions(self) -> list[int]: ...


def check_version(version: int) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise WeightStoreError(f"policy version must be a non-negative int, got {version!r}")


async def wait_for_room(
    versions: Any, max_versions: int | None, deadline: float, what: str
) -> None:
    """Poll `versions()` until the store has room for one more version or `deadline` passes."""
    if max_versions is None:
        return
    delay = 0.005
    while len(await versions()) >= max_versions:
        if time.monotonic() + delay > deadline:
            raise WeightStoreTimeoutError(
                f"{what}: the store holds {max_versions} versions (max_versions={max_versions}, "
                "on_full='block') and no consumer dropped one before the put timeout"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)

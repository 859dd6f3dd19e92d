"""The weight store's contract: the `WeightStore` protocol every backend meets (`store.py`'s
local and Monarch stores, `torchstore_store.py`), its errors, and the checks the backends share
(a policy version's type, waiting for room in a full store with `on_full="block"`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol

from forge_agent.lazy import LazyModule
from forge_agent.weights.layout import StateDict

# imported on first use (`LazyModule`): the driver hosts the store's actor, no tensor
torch = LazyModule("torch")

__all__ = [
    "VersionedPuts",
    "WeightStore",
    "WeightStoreError",
    "WeightStoreTimeoutError",
    "check_version",
    "materialize",
    "put_within",
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
    versions: Callable[[], Awaitable[list[int]]],
    max_versions: int | None,
    deadline: float,
    what: str,
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


def materialize(
    views: StateDict, into: Mapping[str, torch.Tensor] | None, version: int
) -> StateDict:
    """Copy the stored views into `into` (in place) or into fresh tensors."""
    if into is None:
        return {k: v.clone() for k, v in views.items()}
    missing = sorted(set(views) - set(into))
    if missing:
        raise WeightStoreError(f"version {version}: `into` lacks tensors {missing[:5]}")
    out = {}
    for k, v in views.items():
        dst = into[k]
        if dst.shape != v.shape:
            raise WeightStoreError(
                f"version {version}: tensor {k!r} has shape {tuple(v.shape)} in the store but "
                f"{tuple(dst.shape)} in `into`"
            )
        with torch.no_grad():
            dst.copy_(v)
        out[k] = dst
    return out


class VersionedPuts:
    """What the Monarch and TorchStore backends share: `put` checks the version and runs the
    backend's `_put` within `put_timeout_s` (`put_within`); `latest_version` is the newest of
    `versions()`."""

    put_timeout_s: float

    async def versions(self) -> list[int]:
        raise NotImplementedError

    async def _put(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        raise NotImplementedError

    async def latest_version(self) -> int | None:
        vs = await self.versions()
        return vs[-1] if vs else None

    async def put(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Store `state_dict` as `version` (evicting or waiting for room first), within
        `put_timeout_s`."""
        check_version(version)
        await put_within(self._put(version, state_dict), version, self.put_timeout_s)


async def put_within(put: Coroutine[Any, Any, None], version: int, timeout_s: float) -> None:
    """Await a backend's `put` of `version`; past `timeout_s` (a full store, a hung actor)
    raise `WeightStoreTimeoutError` instead of hanging the trainer. Every backend's `put`
    goes through here."""
    try:
        await asyncio.wait_for(put, timeout_s)
    except TimeoutError as e:
        if isinstance(e, WeightStoreTimeoutError):
            raise
        raise WeightStoreTimeoutError(
            f"put(version={version}) did not finish within put_timeout_s={timeout_s}s "
            "(store busy, hung or full)"
        ) from e

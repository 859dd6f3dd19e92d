"""The TorchStore backend of the weight store (`weight_store.backend=torchstore`): versioned
state dicts in the real `torchstore` package (0.1.2, through
`forge_agent.weights.torchstore_compat` on Monarch 0.7).

    store = TorchStoreWeightStore()
    await store.initialize(mesh=procs)        # TorchStore's controller + one storage volume
    await store.put(version, trainer.state_dict())
    sd = await store.get(version, into=model.state_dict())
    await store.close()

A version is `torchstore.put_state_dict(sd, "{prefix}/v{version}")`: one TorchStore key per
tensor (`{prefix}/v{version}/{name}`), then the `.../MAPPING` key, which TorchStore writes
last; a version counts as stored once its MAPPING key exists. TorchStore sends each tensor as
its own Monarch message to the storage volume (RDMA where Monarch has it; not on these
machines), and tells its controller about each key in another.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from forge_agent.weights.config import OnFull
from forge_agent.weights.layout import StateDict
from forge_agent.weights.protocol import (
    VersionedPuts,
    WeightStoreError,
    wait_for_room,
)

if TYPE_CHECKING:
    from monarch.actor import ProcMesh

MAPPING = "MAPPING"  # the key TorchStore's put_state_dict writes last


def _api() -> tuple[Any, Any]:
    """(torchstore, the compat layer), or an ImportError naming the backend and the fix."""
    try:  # the layer first: it prepares torchstore's import (see its docstring)
        # imported here: inside the try: the compat layer's own ImportError names the torchstore
        # version
        from forge_agent.weights import torchstore_compat

        torchstore = importlib.import_module("torchstore")
    except ImportError as exc:
        if exc.__class__.__name__ == "TorchStoreVersionError":
            raise
        raise ImportError(
            "weight_store.backend=torchstore needs the `torchstore` package (`pip install "
            f"--no-deps torchstore==0.1.2 pygtrie`, as scripts/setup.sh does): {exc}"
        ) from exc
    return torchstore, torchstore_compat


class TorchStoreWeightStore(VersionedPuts):
    """Versions as TorchStore state dicts under `{prefix}/v{version}` in the TorchStore named
    `store_name` (unique per store by default). Picklable: trainer and generator actors get
    a copy that talks to the same TorchStore. Call `initialize` once, in the process that
    owns the run, before handing it out."""

    def __init__(
        self,
        prefix: str = "policy",
        store_name: str | None = None,
        max_versions: int | None = 2,
        on_full: OnFull = "evict",
        put_timeout_s: float = 60.0,
    ) -> None:
        _api()
        if max_versions is not None and max_versions < 1:
            raise ValueError(f"max_versions must be >= 1 or None, got {max_versions}")
        self.prefix = prefix
        self.store_name = store_name or f"forge-weights-{uuid.uuid4().hex[:8]}"
        self.max_versions, self.on_full, self.put_timeout_s = max_versions, on_full, put_timeout_s

    async def initialize(self, mesh: ProcMesh | None = None) -> None:
        """Start TorchStore's controller and one storage volume, on `mesh` (a one-proc mesh)
        or, when None, on a new proc of this host."""
        await _api()[1].initialize(self.store_name, mesh=mesh)

    def _key(self, version: int) -> str:
        return f"{self.prefix}/v{version}"

    async def _keys(self) -> list[str]:
        # every key, filtered here: TorchStore matches a prefix by whole '.'-separated parts
        # ("policy/v1" is no prefix of "policy/v1/embed.weight" to it)
        return await _api()[1].keys(None, self.store_name)

    async def versions(self) -> list[int]:
        head, found = f"{self.prefix}/v", set()
        for key in await self._keys():
            if key.startswith(head) and key.endswith(f"/{MAPPING}"):
                digits = key[len(head) : -len(MAPPING) - 1]
                if digits.isdigit():
                    found.add(int(digits))
        return sorted(found)

    async def _put(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> None:
        deadline = time.monotonic() + self.put_timeout_s
        if self.max_versions is not None:
            if self.on_full == "evict":
                vs = [v for v in await self.versions() if v != version]
                for old in vs[: max(0, len(vs) - self.max_versions + 1)]:
                    await self.drop(old)
            else:
                await wait_for_room(self.versions, self.max_versions, deadline, "put")
        ts = _api()[0]
        await ts.put_state_dict(dict(state_dict), self._key(version), store_name=self.store_name)

    async def get(
        self, version: int | None = None, into: Mapping[str, torch.Tensor] | None = None
    ) -> StateDict:
        """Fetch `version` (latest when None): copied into `into`'s tensors in place where
        `into` names them, else into fresh tensors."""
        v = await self.latest_version() if version is None else version
        if v is None:
            raise WeightStoreError("get(None): the store holds no version")
        ts = _api()[0]
        user = dict(into) if into is not None else None
        try:
            return await ts.get_state_dict(
                self._key(v), user_state_dict=user, strict=False, store_name=self.store_name
            )
        except RuntimeError as e:
            have = await self.versions()
            raise WeightStoreError(f"version {v} not in store (have {have}): {e}") from e

    async def drop(self, version: int) -> None:
        """Delete every key of `version` (its MAPPING first, so it stops counting at once,
        then its tensors concurrently); not those of versions that share its digits (v1 vs
        v10)."""
        ts, key = _api()[0], self._key(version)
        found = [k for k in await self._keys() if k.startswith(key + "/")]
        if f"{key}/{MAPPING}" in found:
            found.remove(f"{key}/{MAPPING}")
            await ts.delete(f"{key}/{MAPPING}", store_name=self.store_name)
        await asyncio.gather(*(ts.delete(k, store_name=self.store_name) for k in found))

    async def close(self) -> None:
        """Tear this TorchStore down (its controller forgets every key; volumes are reset)."""
        await _api()[0].shutdown(self.store_name)

"""TorchStore 0.1.2 on Monarch 0.7: the compatibility layer `weight_store.backend=torchstore`
runs the real `torchstore` package through.

Why it exists: PyPI's only TorchStore release, 0.1.2, was built for torchmonarch 0.1.2. Its
`Controller` actor declares five endpoints as plain `def` (`get_controller_strategy`,
`locate_volumes`, `notify_put`, `keys`, `notify_delete`) beside async ones, and Monarch 0.7
refuses such an actor ("Controller mixes both async and sync endpoints"), so
`torchstore.initialize()` fails. Nothing else in the package needs changing on this stack
(torch 2.13, torchmonarch 0.7; no RDMA here, so tensors travel as Monarch messages).

What it does, without editing or patching the installed package:
- `AsyncController` subclasses TorchStore's `Controller` and declares those five endpoints
  `async`, each running TorchStore's own body unchanged. `initialize` spawns it as the store's
  controller (Monarch's public `get_or_spawn_controller`, under the store's name, the name
  TorchStore looks its controller up by) before calling `torchstore.initialize`, which then
  finds it instead of spawning the plain `Controller`.
- `keys(prefix, store_name)`: `torchstore.keys` takes no store name in 0.1.2 (it always asks
  the default store); this asks the named store's client.
- Importing `torchstore` sets up root logging at INFO on stdout unless
  `HYPERACTOR_CODEC_MAX_FRAME_LENGTH` is set (it raises that Monarch limit). Monarch 0.7's own
  default is already 10 GiB, so this module sets the variable to Monarch's configured value
  first, and a run's logging stays as the run set it.

It refuses (`TorchStoreVersionError`, naming the installed and the known versions) any
torchstore or torchmonarch it was not checked against: a controller subclass of another
release could silently lose an endpoint.

Delete it when a TorchStore release after 0.1.2 reaches PyPI with every `Controller` endpoint
async (upstream's main branch has them so since late 2025) and a Monarch >= 0.7 pin; then
`forge_agent/weights/torchstore_store.py` calls `torchstore.initialize` and
`torchstore.keys` directly.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import TYPE_CHECKING, Any

KNOWN_VERSIONS: dict[str, tuple[str, ...]] = {"torchstore": ("0.1.2",), "torchmonarch": ("0.7.0",)}


class TorchStoreVersionError(ImportError):
    """The installed torchstore or torchmonarch is not a version this layer knows."""


def installed_versions() -> dict[str, str | None]:
    """The installed version of each package in `KNOWN_VERSIONS` (None: not installed)."""
    found: dict[str, str | None] = {}
    for name in KNOWN_VERSIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def check_versions(installed: dict[str, str | None] | None = None) -> None:
    """Raise `TorchStoreVersionError` unless every package is a known version."""
    installed = installed_versions() if installed is None else installed
    unknown = {n: v for n, v in installed.items() if v not in KNOWN_VERSIONS[n]}
    if unknown:
        have = ", ".join(f"{n} {v or 'not installed'}" for n, v in installed.items())
        known = ", ".join(f"{n} {' | '.join(vs)}" for n, vs in KNOWN_VERSIONS.items())
        raise TorchStoreVersionError(
            f"weight_store.backend=torchstore: installed {have}; forge_agent's TorchStore "
            f"layer (forge_agent/weights/torchstore_compat.py) knows {known}. Install "
            "`torchstore==0.1.2 pygtrie` with `pip install --no-deps` (scripts/setup.sh), or "
            "check the layer against the new versions and add them to KNOWN_VERSIONS"
        )


check_versions()

from monarch.actor import endpoint, get_or_spawn_controller  # noqa: E402
from monarch.config import get_global_config  # noqa: E402

os.environ.setdefault(
    "HYPERACTOR_CODEC_MAX_FRAME_LENGTH", str(get_global_config()["codec_max_frame_length"])
)

import torchstore  # noqa: E402
from torchstore.controller import Controller, StorageInfo  # noqa: E402
from torchstore.strategy import TorchStoreStrategy  # noqa: E402
from torchstore.transport.pipe import Request  # noqa: E402

if TYPE_CHECKING:
    from monarch.actor import ProcMesh


def _body(name: str) -> Any:
    """The function TorchStore's `Controller` declared as endpoint `name` (Monarch 0.7 keeps
    it as the endpoint's `_method`; the version check pins that)."""
    return getattr(Controller, name)._method


class AsyncController(Controller):
    """TorchStore's `Controller` with its five plain-`def` endpoints declared `async` (same
    bodies), so Monarch 0.7 accepts it."""

    @endpoint
    async def get_controller_strategy(self) -> TorchStoreStrategy:
        return _body("get_controller_strategy")(self)

    @endpoint
    async def locate_volumes(self, key: str) -> dict[str, StorageInfo]:
        return _body("locate_volumes")(self, key)

    @endpoint
    async def notify_put(self, key: str, request: Request, storage_volume_id: str) -> None:
        _body("notify_put")(self, key, request, storage_volume_id)

    @endpoint
    async def keys(self, prefix: str | None = None) -> list[str]:
        return _body("keys")(self, prefix)

    @endpoint
    async def notify_delete(self, key: str, storage_volume_id: str) -> None:
        _body("notify_delete")(self, key, storage_volume_id)


async def initialize(store_name: str, mesh: ProcMesh | None = None) -> None:
    """`torchstore.initialize` (one storage volume, on `mesh`'s one proc, or on a new proc of
    this host when None) with `AsyncController` as the store's controller."""
    await get_or_spawn_controller(store_name, AsyncController)
    await torchstore.initialize(store_name=store_name, mesh=mesh)


async def keys(prefix: str | None, store_name: str) -> list[str]:
    """The keys of store `store_name` under `prefix` (None: every key). TorchStore matches a
    prefix by whole '.'-separated parts: "a.b" is under "a", "ab" is not."""
    client = await torchstore.client(store_name)
    return await client.keys(prefix)

"""Versioned weight store: the trainer `put`s a state dict under a policy version, generators
`get` it. The API follows TorchStore's shape (`put_state_dict(sd, key)` /
`get_state_dict(key, user_state_dict)`), keyed by an integer policy version:

    await store.put(version, trainer.state_dict())
    sd = await store.get(version, into=model.state_dict())   # copies into existing tensors
    await store.drop(version); await store.latest_version()

Backends (`make_weight_store(WeightStoreConfig(backend=...))`, chosen by config only), a
module each:
- `LocalWeightStore` (`weights/local_store.py`): in-process (one event loop), for tests and
  single-process runs.
- `MonarchWeightStore` (`weights/monarch_store.py`): a client for a `WeightStoreActor` (a
  Monarch actor that owns the versions). Each put is ONE flat contiguous byte buffer plus a
  small table of tensor metadata, never one message per tensor. When the store actor runs on
  the caller's host the buffer lives in shared memory (`/dev/shm`, page-locked for a GPU
  trainer): written once, read once, only a file name through Monarch ("shm"). Across hosts:
  one Monarch message ("message"). Colocated on one GPU: a slot of the trainer's device
  memory, its CUDA IPC handle through Monarch ("device", `weights/device_slots.py`; on CPU a
  named host stand-in). Dropped versions' buffers are recycled: faulting in fresh pages
  (~0.3 GB/s here) costs far more than copying into mapped ones (~5 GB/s).
- `TorchStoreWeightStore` (`forge_agent/weights/torchstore_store.py`): the real TorchStore
  package (`torchstore` 0.1.2, adapted to Monarch 0.7 by `weights/torchstore_compat.py`).

Capacity: `max_versions` versions. When full, `on_full="evict"` drops the oldest;
`on_full="block"` waits for a consumer to `drop` one. A put not done within `put_timeout_s`
(full store, hung actor) raises `WeightStoreTimeoutError` instead of hanging the trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forge_agent.lazy import lazy_exports
from forge_agent.weights.config import WeightStoreConfig
from forge_agent.weights.monarch_store import MonarchWeightStore, WeightStoreActor
from forge_agent.weights.protocol import WeightStore, WeightStoreError, WeightStoreTimeoutError

if TYPE_CHECKING:
    from monarch.actor import ProcMesh

    from forge_agent.weights.local_store import LocalWeightStore

# the in-process and TorchStore backends import torch at their top (0.15 GB of PSS, measured,
# in the driver, which builds the default's "monarch" store and touches no tensor)
__getattr__ = lazy_exports(
    __name__,
    {
        "LocalWeightStore": "forge_agent.weights.local_store",
        "TorchStoreWeightStore": "forge_agent.weights.torchstore_store",
    },
)

__all__ = [
    "LocalWeightStore",
    "MonarchWeightStore",
    "WeightStore",
    "WeightStoreActor",
    "WeightStoreConfig",
    "WeightStoreError",
    "WeightStoreTimeoutError",
    "make_weight_store",
]


async def make_weight_store(
    cfg: WeightStoreConfig, procs: ProcMesh | None = None, transport: str = "auto"
) -> WeightStore:
    """Build the weight store ``cfg.backend`` names (``procs``: a one-proc mesh for "monarch",
    where "torchstore" puts its storage volume too; a new proc of this host when None;
    ``transport``: the "monarch" client's, `MonarchWeightStore`)."""
    kwargs = dict(max_versions=cfg.max_versions, on_full=cfg.on_full)
    kwargs["put_timeout_s"] = cfg.put_timeout_s
    if cfg.backend == "local":
        # imported here: torch, 0.15 GB of PSS (measured); only for this backend
        from forge_agent.weights.local_store import LocalWeightStore

        return LocalWeightStore(**kwargs)
    if cfg.backend == "monarch":
        if procs is None:
            raise ValueError("weight_store.backend=monarch needs procs= (a Monarch proc mesh)")
        return await MonarchWeightStore.spawn(procs, transport=transport, **kwargs)
    if cfg.backend == "torchstore":
        # imported here: torch, 0.15 GB of PSS (measured); only for this backend
        from forge_agent.weights.torchstore_store import TorchStoreWeightStore

        store = TorchStoreWeightStore(**kwargs)
        await store.initialize(mesh=procs)
        return store
    raise ValueError(
        f"weight_store.backend={cfg.backend!r}; expected 'monarch', 'torchstore' or 'local'"
    )

"""The TorchStore weight store on the real `torchstore` package (0.1.2 through
`forge_agent.weights.torchstore_compat` on Monarch 0.7): its controller in this process, its
storage volume in a proc of its own."""

from __future__ import annotations

import asyncio
import sys

import pytest
import torch

from forge_agent.weights.store import WeightStoreConfig, WeightStoreError, make_weight_store
from forge_agent.weights.torchstore_store import TorchStoreWeightStore
from tests.helpers import spawn_test_procs
from tests.test_weight_store import assert_same, state_dict


@pytest.fixture(scope="module")
def volume_procs():
    """One proc for the storage volumes of this module's stores."""
    procs = spawn_test_procs(1)
    yield procs
    procs.stop().get()


def _with_store(procs, body, **kwargs):
    """Run `body(store)` on a fresh TorchStore (closed afterwards); returns its result."""

    async def run():
        store = TorchStoreWeightStore(**kwargs)
        await store.initialize(mesh=procs)
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(run())


def test_the_config_builds_the_real_torchstore_and_it_round_trips_bit_for_bit(volume_procs):
    async def run():
        cfg = WeightStoreConfig(backend="torchstore", max_versions=3)
        store = await make_weight_store(cfg, volume_procs)
        try:
            await store.put(0, state_dict(0))
            return store, await store.versions(), await store.get(0)
        finally:
            await store.close()

    store, versions, got = asyncio.run(run())
    assert isinstance(store, TorchStoreWeightStore) and store.max_versions == 3
    assert type(store).__module__ == "forge_agent.weights.torchstore_store"
    assert versions == [0]
    assert_same(got, state_dict(0))  # bf16, int64 and a non-contiguous tensor, exactly


def test_drop_of_v1_keeps_versions_10_to_19(volume_procs):
    async def body(store):
        for v in [1, *range(10, 20)]:
            await store.put(v, state_dict(seed=v))
        await store.drop(1)
        return await store.versions(), await store.get(15)

    versions, got = _with_store(volume_procs, body, max_versions=None)
    assert versions == list(range(10, 20))
    assert_same(got, state_dict(seed=15))


def test_get_copies_into_given_tensors_and_a_full_store_evicts_the_oldest(volume_procs):
    async def body(store):
        for v in (1, 2, 3):
            await store.put(v, state_dict(seed=v))
        into = {k: torch.empty_like(t) for k, t in state_dict().items()}
        got = await store.get(3, into=into)
        return await store.versions(), into, got, await store.get()

    versions, into, got, latest = _with_store(volume_procs, body, max_versions=2)
    assert versions == [2, 3]
    for k in into:
        assert got[k].data_ptr() == into[k].data_ptr()  # filled in place
    assert_same(into, state_dict(seed=3))
    assert_same(latest, state_dict(seed=3))


def test_an_unknown_version_is_a_weight_store_error_naming_what_is_stored(volume_procs):
    async def body(store):
        await store.put(2, state_dict())
        with pytest.raises(WeightStoreError, match=r"version 5 not in store \(have \[2\]\)"):
            await store.get(5)

    _with_store(volume_procs, body)


def test_a_store_handed_to_an_actor_reads_the_same_torchstore(volume_procs):
    """The store is picklable: an actor in another proc gets what this process put."""
    from tests.helpers import StoreReader

    reader = volume_procs.spawn("torchstore_reader", StoreReader)

    async def body(store):
        await store.put(7, state_dict(7))
        return await reader.checksums.call_one(store, 7)

    sums = _with_store(volume_procs, body)
    assert sums == {k: float(v.double().sum()) for k, v in state_dict(7).items()}


def test_unknown_torchstore_or_monarch_versions_are_refused_by_name():
    from forge_agent.weights.torchstore_compat import TorchStoreVersionError, check_versions

    check_versions({"torchstore": "0.1.2", "torchmonarch": "0.7.0"})
    with pytest.raises(TorchStoreVersionError) as err:
        check_versions({"torchstore": "0.2.0", "torchmonarch": "0.7.0"})
    message = str(err.value)
    assert "installed torchstore 0.2.0, torchmonarch 0.7.0" in message
    assert "knows torchstore 0.1.2, torchmonarch 0.7.0" in message
    with pytest.raises(TorchStoreVersionError, match=r"torchmonarch 0\.1\.2"):
        check_versions({"torchstore": "0.1.2", "torchmonarch": "0.1.2"})
    with pytest.raises(TorchStoreVersionError, match="torchstore not installed"):
        check_versions({"torchstore": None, "torchmonarch": "0.7.0"})


def test_without_the_package_the_backend_names_it_and_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchstore", None)  # `import torchstore` fails
    with pytest.raises(ImportError, match=r"backend=torchstore needs .*--no-deps torchstore"):
        TorchStoreWeightStore()


def test_monarch_refuses_torchstores_own_controller_which_is_why_the_layer_exists():
    """When this fails, TorchStore's controller runs on the installed Monarch as it is: delete
    `forge_agent/weights/torchstore_compat.py` (see its docstring)."""
    from monarch.actor import get_or_spawn_controller
    from torchstore.controller import Controller

    async def run():
        await get_or_spawn_controller("plain-torchstore-controller", Controller)

    with pytest.raises(Exception, match="mixes both async and sync endpoints"):
        asyncio.run(run())

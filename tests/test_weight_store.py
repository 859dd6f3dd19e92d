"""Versioned weight stores: in-process and the Monarch actor store (shm, message and device
transports)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import torch

from forge_agent.weights.store import (
    LocalWeightStore,
    MonarchWeightStore,
    WeightStoreConfig,
    WeightStoreError,
    WeightStoreTimeoutError,
    make_weight_store,
)
from tests.helpers import spawn_test_procs


def state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(33, 7, generator=g),
        "layer.bias": torch.randn(5, generator=g).to(torch.bfloat16),
        "head.weight": torch.randn(7, 33, generator=g).t(),  # non-contiguous
        "steps": torch.tensor([3], dtype=torch.int64),
    }


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_local_store_round_trips_versions_and_copies_on_put():
    async def run():
        store = LocalWeightStore(max_versions=None)
        sd = state_dict()
        await store.put(1, sd)
        sd["embed.weight"].add_(1.0)  # trainer keeps training: stored version must not change
        await store.put(2, sd)
        assert await store.versions() == [1, 2] and await store.latest_version() == 2
        got1 = await store.get(1)
        assert_same(await store.get(), sd)
        await store.drop(2)
        assert await store.latest_version() == 1
        return got1

    got1 = asyncio.run(run())
    assert_same(got1, state_dict())


def test_get_into_copies_in_place():
    async def run():
        store = LocalWeightStore()
        await store.put(0, state_dict())
        dst = {k: torch.zeros_like(v) for k, v in state_dict().items()}
        ptrs = {k: v.data_ptr() for k, v in dst.items()}
        got = await store.get(0, into=dst)
        return got, ptrs

    got, ptrs = asyncio.run(run())
    assert_same(got, state_dict())
    assert {k: v.data_ptr() for k, v in got.items()} == ptrs


def test_full_store_evicts_the_oldest_version():
    async def run():
        store = LocalWeightStore(max_versions=2)
        for v in range(4):
            await store.put(v, state_dict(v))
        return await store.versions()

    assert asyncio.run(run()) == [2, 3]


def test_blocking_put_times_out_with_a_clear_error_instead_of_hanging():
    async def run():
        store = LocalWeightStore(max_versions=1, on_full="block", put_timeout_s=0.2)
        await store.put(0, state_dict())
        t0 = time.monotonic()
        with pytest.raises(WeightStoreTimeoutError, match="max_versions=1"):
            await store.put(1, state_dict())
        return time.monotonic() - t0

    assert asyncio.run(run()) < 2.0


def test_blocking_put_proceeds_once_a_consumer_drops_a_version():
    async def run():
        store = LocalWeightStore(max_versions=1, on_full="block", put_timeout_s=5.0)
        await store.put(0, state_dict())

        async def consumer():
            await asyncio.sleep(0.05)
            await store.get(0)
            await store.drop(0)

        await asyncio.gather(store.put(1, state_dict(1)), consumer())
        return await store.versions()

    assert asyncio.run(run()) == [1]


def test_unknown_version_and_bad_versions_name_the_value():
    async def run():
        store = LocalWeightStore()
        with pytest.raises(WeightStoreError, match="version 7 not in store"):
            await store.get(7)
        with pytest.raises(WeightStoreError, match="non-negative int, got -1"):
            await store.put(-1, state_dict())

    asyncio.run(run())


@pytest.fixture(scope="module")
def store_procs():
    procs = spawn_test_procs(1)
    yield procs
    procs.stop().get()


@pytest.mark.parametrize("transport", ["shm", "message"])
def test_monarch_store_round_trips_through_the_actor(store_procs, transport):
    async def run():
        store = await MonarchWeightStore.spawn(
            store_procs, name=f"ws_{transport}", transport=transport, max_versions=2
        )
        for v in range(3):
            await store.put(v, state_dict(v))
        versions = await store.versions()
        got = await store.get()
        into = {k: torch.empty_like(v) for k, v in state_dict().items()}
        got1 = await store.get(1, into=into)
        await store.close()
        return versions, got, got1

    versions, got, got1 = asyncio.run(run())
    assert versions == [1, 2]
    assert_same(got, state_dict(2))
    assert_same(got1, state_dict(1))


@pytest.mark.parametrize("transport", ["shm", "message"])
def test_a_same_host_reader_maps_the_stored_version_in_place(store_procs, transport):
    from forge_agent.weights.layout import map_shared_view

    async def run():
        store = await MonarchWeightStore.spawn(
            store_procs, name=f"ws_view_{transport}", transport=transport
        )
        await store.put(4, state_dict(4))
        view = await store.shared_view(4)
        mapped = map_shared_view(view.path, view.nbytes, view.metas) if view else None
        await store.close()
        return view, mapped

    view, mapped = asyncio.run(run())
    if transport == "message":  # the cross-host path has no shared file to map
        assert view is None
        return
    assert view.version == 4 and view.path.startswith("/dev/shm/")
    assert_same(mapped, state_dict(4))


def test_monarch_shm_store_recycles_buffers_and_removes_files_on_close(store_procs):
    async def run():
        store = await MonarchWeightStore.spawn(store_procs, name="ws_recycle", max_versions=1)
        host = await store.actor.host.call_one()
        before = set(os.listdir("/dev/shm"))
        for v in range(5):
            await store.put(v, state_dict(v))
        created = set(os.listdir("/dev/shm")) - before
        assert_same(await store.get(4), state_dict(4))
        await store.close()
        left = set(os.listdir("/dev/shm")) & created
        return store._resolved, host, created, left

    transport, host, created, left = asyncio.run(run())
    assert transport == "shm" and host[2]
    assert 1 <= len(created) <= 2  # five puts, buffers reused
    assert left == set()


def test_a_colocated_store_keeps_snapshots_in_slots_of_the_putting_process(store_procs):
    """The device transport (`services.colocate`) on CPU, through its named stand-in: the slots
    are host shared memory instead of the trainer's GPU memory; the table of versions, the
    handles and the reads are the code a GPU runs (tests/test_colocation_cuda.py: the CUDA
    slot opened by another process)."""
    import pickle

    from forge_agent.weights.device_slots import open_slot
    from forge_agent.weights.layout import TensorMeta, unpack

    async def run():
        store = await MonarchWeightStore.spawn(
            store_procs, name="ws_device", transport="device", max_versions=2
        )
        before = set(os.listdir("/dev/shm"))
        for v in range(5):
            trained = state_dict(v)
            await store.put(v, trained)
        trained["embed.weight"].add_(1.0)  # the next optimizer step leaves version 4 as it was
        created = set(os.listdir("/dev/shm")) - before
        view, shared = await store.device_view(4), await store.shared_view(4)
        metas = [TensorMeta(n, d, tuple(sh), o, b) for n, d, sh, o, b in view.metas]
        opened = unpack(metas, open_slot(view.handle)[: view.nbytes])
        got3, versions = await store.get(3), await store.versions()
        handed = pickle.loads(pickle.dumps(store))  # a generator's copy of the client
        await store.close()
        left = set(os.listdir("/dev/shm")) & created
        return view, shared, opened, got3, versions, handed, created, left

    view, shared, opened, got3, versions, handed, created, left = asyncio.run(run())
    assert view.version == 4 and shared is None
    assert_same(opened, state_dict(4))
    assert_same(got3, state_dict(3))
    assert versions == [3, 4]
    assert len(created) == 2  # five puts in two slots, one per version kept
    assert handed._slots is None  # the slots stay with the process that made them
    assert left == set()


def test_a_device_transport_packs_a_state_dict_on_one_device_only():
    from forge_agent.weights.device_slots import device_of

    with pytest.raises(WeightStoreError, match=r"one device.*meta"):
        device_of({"a": torch.zeros(2), "b": torch.zeros(2, device="meta")})


def test_stand_in_slots_of_a_dead_trainer_are_removed_by_the_next_one(tmp_path):
    import subprocess
    import sys

    from forge_agent.weights.device_slots import DeviceSlots

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = tmp_path / f"forge_ds_{int(gone.stdout)}_0badf00d"
    live = tmp_path / f"forge_ds_{os.getpid()}_0c0ffee0"
    other = tmp_path / "forge_ws_1_keep"
    for path in (dead, live, other):
        path.write_bytes(b"x")
    DeviceSlots(2, shm_dir=str(tmp_path))
    assert not dead.exists() and live.exists() and other.exists()


def test_a_cpu_trainers_slots_are_not_page_locked_and_cuda_stays_untouched():
    from forge_agent.weights.device_slots import HostLocks

    locks = HostLocks()
    locks.lock("slot", torch.zeros(64, dtype=torch.uint8), state_dict())
    assert locks._locked == {} and not torch.cuda.is_initialized()


def test_a_gpu_trainers_copies_go_into_a_page_locked_slot(store_procs):
    """The shm transport with a GPU trainer: the slot is page-locked in place
    (`cudaHostRegister`) before the device-to-host pack, once per slot."""
    if torch.cuda.device_count() == 0:
        pytest.skip("no CUDA device")

    async def run():
        store = await MonarchWeightStore.spawn(store_procs, name="ws_locked", transport="shm")
        for v in range(3):
            await store.put(v, {k: t.cuda() for k, t in state_dict(v).items()})
        locked = dict(store._locks._locked)
        got = await store.get(2)
        await store.close()
        return locked, got, dict(store._locks._locked)

    locked, got, after_close = asyncio.run(run())
    assert locked and all(ptr is not None for ptr in locked.values())
    assert len(locked) <= 2  # three puts, slots reused
    assert_same(got, state_dict(2))
    assert after_close == {}


def test_monarch_blocking_put_times_out(store_procs):
    async def run():
        store = await MonarchWeightStore.spawn(
            store_procs, name="ws_block", max_versions=1, on_full="block", put_timeout_s=0.3
        )
        await store.put(0, state_dict())
        try:
            with pytest.raises(WeightStoreTimeoutError, match=r"max_versions=1|put_timeout_s=0\.3"):
                await store.put(1, state_dict())
        finally:
            await store.close()

    asyncio.run(run())


def test_the_backend_is_the_one_the_config_names():
    store = asyncio.run(make_weight_store(WeightStoreConfig(backend="local", max_versions=3)))
    assert isinstance(store, LocalWeightStore) and store.max_versions == 3
    with pytest.raises(ValueError, match=r"weight_store\.backend=monarch needs procs="):
        asyncio.run(make_weight_store(WeightStoreConfig(backend="monarch")))

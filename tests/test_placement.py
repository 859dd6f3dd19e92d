"""Placement of a GPU config's services: every GPU proc sees its own, disjoint devices.

The host's device count is faked (this machine has no GPU); the procs are real Monarch procs,
spawned by the same `Placement` calls the controller makes, and each reports the
CUDA_VISIBLE_DEVICES its bootstrap set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_agent.hosts.placement import Placement
from forge_agent.run.config import load_config
from tests.helpers import VisibleDevices

AGENT_DIR = Path(__file__).resolve().parents[1] / "apps" / "agent"


def visible(mesh) -> list[str | None]:
    answers = mesh.spawn("visible", VisibleDevices).devices.call().get()
    return [value for _, value in sorted(answers.items(), key=lambda kv: str(kv[0]))]


def test_each_gpu_proc_of_the_8b_config_sees_its_own_disjoint_devices():
    cfg = load_config(AGENT_DIR / "qwen3_8b_code_exec.yaml")
    placement = Placement(cfg.services, cfg.generator.tensor_parallel_size, gpu_count=8)
    try:
        trainer = visible(placement.trainer_procs())
        generators = [visible(placement.generator_procs(i)) for i in range(2)]
        reward = visible(placement.reward_procs())
    finally:
        for mesh in placement.meshes:
            mesh.stop().get()
    assert sorted(trainer) == ["0", "1", "2", "3"]  # 4 FSDP/TP ranks, one GPU each
    assert sorted(generators) == [["4,5"], ["6,7"]]  # 2 replicas x tensor_parallel_size 2
    assert reward == [None]  # CPU service: no devices set
    every = [d for proc in trainer + [g[0] for g in generators] for d in proc.split(",")]
    assert sorted(every) == [str(i) for i in range(8)]  # disjoint, all 8 used


@pytest.mark.parametrize("trainer_first", [True, False], ids=["trainer_first", "generator_first"])
def test_colocated_the_trainer_and_the_generator_share_the_hosts_one_gpu(trainer_first):
    """`apps/agent/gpu_1x.yaml` (`services.colocate: sleep`) on a host of one GPU, whichever
    service is spawned first (the controller starts them together)."""
    cfg = load_config(AGENT_DIR / "gpu_1x.yaml")
    placement = Placement(cfg.services, cfg.generator.tensor_parallel_size, gpu_count=1)
    try:
        if trainer_first:
            trainer = visible(placement.trainer_procs())
            generator = visible(placement.generator_procs(0))
        else:
            generator = visible(placement.generator_procs(0))
            trainer = visible(placement.trainer_procs())
    finally:
        for mesh in placement.meshes:
            mesh.stop().get()
    assert trainer == ["0"] and generator == ["0"]


def test_asking_for_more_gpus_than_the_host_has_names_the_service_and_the_count():
    cfg = load_config(AGENT_DIR / "qwen3_8b_code_exec.yaml")
    placement = Placement(cfg.services, cfg.generator.tensor_parallel_size, gpu_count=2)
    with pytest.raises(RuntimeError, match=r"trainer needs 1 more GPU\(s\) but this host has 2"):
        placement.trainer_procs()
    assert placement.meshes == []


def test_on_this_host_the_weight_store_lives_in_the_controllers_process_without_a_proc():
    """The local default spends no process on the weight store (it only keeps a table of
    shared-memory files): its actor runs in the calling process, and weights still round-trip
    through shared memory."""
    import asyncio
    import os

    import torch

    from forge_agent.weights.config import WeightStoreConfig

    cfg = load_config(AGENT_DIR / "default.yaml")

    async def put_get():
        placement = Placement(cfg.services, hosts=cfg.hosts)
        store = await placement.weight_store(WeightStoreConfig())
        try:
            assert placement.meshes == []  # no proc spawned for it
            await store.put(1, {"w": torch.arange(6.0)})
            got = await store.get(1)
            slot = (await store.actor.get.call_one(1))[1].slot
            return got, slot.path
        finally:
            await store.close()

    got, path = asyncio.run(put_get())
    assert torch.equal(got["w"], torch.arange(6.0))
    assert f"forge_ws_{os.getpid()}_" in path  # named by the store actor's process: this one
    assert not os.path.exists(path)  # close removed it

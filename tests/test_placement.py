"""Placement of a GPU config's services: every GPU proc sees its own, disjoint devices.

The host's device count is faked (this machine has no GPU); the procs are real Monarch procs,
spawned by the same `Placement` calls the controller makes, and each reports the
CUDA_VISIBLE_DEVICES its bootstrap set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_agent.config import load_config
from forge_agent.placement import Placement
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


def test_asking_for_more_gpus_than_the_host_has_names_the_service_and_the_count():
    cfg = load_config(AGENT_DIR / "qwen3_8b_code_exec.yaml")
    placement = Placement(cfg.services, cfg.generator.tensor_parallel_size, gpu_count=2)
    with pytest.raises(RuntimeError, match=r"trainer needs 1 more GPU\(s\) but this host has 2"):
        placement.trainer_procs()
    assert placement.meshes == []

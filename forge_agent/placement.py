"""Placement: which local processes (and GPUs) each service of a run gets.

    placement = Placement(cfg.services, gpus_per_generator=cfg.generator.tensor_parallel_size)
    trainer_procs = placement.trainer_procs()        # services.trainer.procs procs, 1 GPU each
    generator_procs = placement.generator_procs(0)   # 1 proc seeing tensor_parallel_size GPUs

Every proc that runs on GPUs gets its own, disjoint ``CUDA_VISIBLE_DEVICES``, set by the proc's
bootstrap before anything in it touches CUDA. GPUs are handed out in the order services are
spawned; asking for more than the host has is an error naming each service's share.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from forge_agent.typed_config import check_field as _check


@dataclass
class TrainerPlacement:
    """The trainer: ``procs`` ranks (FSDP2 for the hf backend, titan's degrees for titan)."""

    procs: int = 1
    with_gpus: bool = False  # one GPU per rank

    def __post_init__(self) -> None:
        _check(self.procs >= 1, "procs", self.procs, "an int >= 1")


@dataclass
class GeneratorPlacement:
    """Generator replicas: one proc each running vLLM (``generator.tensor_parallel_size``
    GPUs per replica with ``with_gpus``)."""

    num_replicas: int = 1
    with_gpus: bool = False

    def __post_init__(self) -> None:
        _check(self.num_replicas >= 1, "num_replicas", self.num_replicas, "an int >= 1")


@dataclass
class Replicas:
    """A CPU service of ``num_replicas`` independent workers."""

    num_replicas: int = 1

    def __post_init__(self) -> None:
        _check(self.num_replicas >= 1, "num_replicas", self.num_replicas, "an int >= 1")


@dataclass
class EnvWorkers:
    """Env worker processes: each runs one episode at a time, so their number bounds the
    episodes in flight. 0 (default): ``per_core`` per core this process may use."""

    num_replicas: int = 0
    per_core: int = 8

    def __post_init__(self) -> None:
        _check(self.num_replicas >= 0, "num_replicas", self.num_replicas, "an int >= 0 (0: auto)")
        _check(self.per_core >= 1, "per_core", self.per_core, "an int >= 1")

    def count(self) -> int:
        """The number of env workers to start."""
        import os

        auto = self.per_core * len(os.sched_getaffinity(0))
        return self.num_replicas or auto


@dataclass
class PlacementConfig:
    """Placement of each service: trainer ranks, generator replicas, reward actors and env
    workers (``env.num_replicas`` env worker processes)."""

    generator: GeneratorPlacement = field(default_factory=GeneratorPlacement)
    trainer: TrainerPlacement = field(default_factory=TrainerPlacement)
    reward: Replicas = field(default_factory=Replicas)
    env: EnvWorkers = field(default_factory=EnvWorkers)


class Placement:
    """Spawns the run's proc meshes on this host and hands out its GPUs.

    ``gpu_count`` is the number of GPUs to hand out (default: ``torch.cuda.device_count()``,
    read once, when the first GPU is asked for).
    """

    def __init__(
        self,
        cfg: PlacementConfig,
        gpus_per_generator: int = 1,
        gpu_count: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.gpus_per_generator = gpus_per_generator
        self.gpu_count = gpu_count
        self.meshes: list[Any] = []
        self.given: list[tuple[str, list[str]]] = []  # (mesh name, devices of each proc)
        self._next_gpu = 0

    def trainer_procs(self) -> Any:
        """The trainer's mesh: ``trainer.procs`` procs, one GPU each with ``with_gpus``."""
        t = self.cfg.trainer
        return self.spawn("trainer", t.procs, 1 if t.with_gpus else 0)

    def generator_procs(self, replica: int) -> Any:
        """Generator replica ``replica``'s mesh: one proc (``gpus_per_generator`` GPUs)."""
        g = self.cfg.generator
        return self.spawn(f"generator{replica}", 1, self.gpus_per_generator if g.with_gpus else 0)

    def reward_procs(self) -> Any:
        """The reward service's mesh: ``reward.num_replicas`` CPU procs."""
        return self.spawn("reward", self.cfg.reward.num_replicas)

    def spawn(self, name: str, procs: int, gpus_per_proc: int = 0) -> Any:
        """A mesh of ``procs`` local procs, each given its own next ``gpus_per_proc`` GPUs."""
        from monarch.actor import this_host

        bootstrap = None
        if gpus_per_proc:
            devices = [self._take_gpus(name, gpus_per_proc) for _ in range(procs)]
            self.given.append((name, devices))
            bootstrap = functools.partial(_set_visible_devices, tuple(devices))
        mesh = this_host().spawn_procs(per_host={"procs": procs}, name=name, bootstrap=bootstrap)
        self.meshes.append(mesh)
        return mesh

    def _take_gpus(self, name: str, n: int) -> str:
        if self.gpu_count is None:
            import torch

            self.gpu_count = torch.cuda.device_count()
        if self._next_gpu + n > self.gpu_count:
            shares = ", ".join(f"{m}: {len(d)} x {d[0].count(',') + 1}" for m, d in self.given)
            raise RuntimeError(
                f"placement: {name} needs {n} more GPU(s) but this host has {self.gpu_count} "
                f"and {self._next_gpu} are already given ({shares or 'none'}); lower "
                "services.*.with_gpus / procs / num_replicas or generator.tensor_parallel_size"
            )
        first = self._next_gpu
        self._next_gpu += n
        return ",".join(str(d) for d in range(first, first + n))


def _set_visible_devices(devices: tuple[str, ...]) -> None:
    """Proc bootstrap: this proc's own GPUs (chosen by its rank in the mesh)."""
    import os

    from monarch.actor import current_rank

    os.environ["CUDA_VISIBLE_DEVICES"] = devices[current_rank().rank]

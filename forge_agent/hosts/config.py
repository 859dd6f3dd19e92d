"""The hosts' config sections: `hosts` (`HostsConfig`: host meshes and which service runs on
which) and `services` (`PlacementConfig`: trainer ranks, generator replicas, reward actors,
env worker processes, colocation). What reads them: `hosts.meshes` and `hosts.placement`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from forge_agent.hosts.serve import parse_address
from forge_agent.typed_config import check_field as _check

SERVICES = ("trainer", "generator", "reward", "env")
LOCAL = "local"


@dataclass
class HostsConfig:
    """Host meshes and the service -> mesh assignment (see module docstring)."""

    kind: Literal["local", "addresses", "slurm", "kubernetes"] = "local"
    addresses: dict[str, list[str]] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)
    client_address: str | None = None
    connect_timeout_s: float = 30.0
    weights_backend: Literal["gloo", "nccl"] = "gloo"
    slurm: dict[str, Any] = field(default_factory=dict)  # extra SlurmJob arguments
    keep_allocation: bool = False  # kind=slurm: leave the job running for the next run
    kubernetes_namespace: str = "default"

    def __post_init__(self) -> None:
        _check(self.connect_timeout_s > 0, "connect_timeout_s", self.connect_timeout_s, "> 0")
        if self.kind == "addresses":
            _check(
                bool(self.addresses), "addresses", self.addresses, "mesh name -> [tcp://HOST:PORT]"
            )
            for name, addresses in self.addresses.items():
                _check(bool(addresses), f"addresses.{name}", addresses, "at least one address")
                for a in addresses:
                    try:
                        parse_address(a)
                    except ValueError as e:
                        _check(False, f"addresses.{name}", a, str(e))
        if self.kind in ("slurm", "kubernetes"):
            _check(bool(self.nodes), "nodes", self.nodes, "mesh name -> node count")
            for name, n in self.nodes.items():
                _check(isinstance(n, int) and n >= 1, f"nodes.{name}", n, "an int >= 1")
        trainer = self.services.get("trainer", LOCAL)
        if self.kind == "addresses" and trainer in self.addresses:
            _check(
                len(self.addresses[trainer]) == 1,
                f"addresses.{trainer}",
                self.addresses[trainer],
                "one address: the trainer's ranks share one host",
            )
        known = set(self.mesh_names()) | {LOCAL}
        for service, mesh in self.services.items():
            _check(service in SERVICES, "services", service, f"one of {list(SERVICES)}")
            _check(mesh in known, f"services.{service}", mesh, f"one of {sorted(known)}")
        if self.client_address is not None:
            _check(
                self.client_address.startswith("tcp://"),
                "client_address",
                self.client_address,
                "tcp://HOST:PORT (PORT may be 0)",
            )

    def mesh_names(self) -> list[str]:
        return list(self.addresses if self.kind == "addresses" else self.nodes)

    def mesh_of(self, service: str) -> str:
        """The mesh `service` runs on ("local": this machine)."""
        return self.services.get(service, LOCAL)

    @property
    def is_local(self) -> bool:
        return self.kind == "local" or all(self.mesh_of(s) == LOCAL for s in SERVICES)

    def host_count(self, mesh: str) -> int:
        """How many hosts mesh `mesh` will have (1 for this host): its `addresses`, or
        its `nodes` in a cluster job."""
        if mesh == LOCAL:
            return 1
        if self.kind == "addresses":
            return len(self.addresses.get(mesh, ()))
        return int(self.nodes.get(mesh, 1))


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
    """Env worker processes: ``num_replicas`` of them (0, the default: ``per_core`` per core
    this process may use), each serving ``envs_per_worker`` env instances at once (one
    episode each, on a thread of its own), so workers x envs_per_worker episodes can be in
    flight (64 on 2 cores)."""

    num_replicas: int = 0
    per_core: int = 1
    envs_per_worker: int = 32

    def __post_init__(self) -> None:
        _check(self.num_replicas >= 0, "num_replicas", self.num_replicas, "an int >= 0 (0: auto)")
        _check(self.per_core >= 1, "per_core", self.per_core, "an int >= 1")
        _check(self.envs_per_worker >= 1, "envs_per_worker", self.envs_per_worker, "an int >= 1")

    def count(self) -> int:
        """The number of env worker processes."""
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
    # off: each on its own devices; sleep: the trainer and the generator on one GPU, the
    # generator asleep while the trainer steps (vLLM's sleep mode); standin: the same calls
    # on CPU, through a stand-in that frees nothing (`generator.sleep.SleepStandin`)
    colocate: Literal["off", "sleep", "standin"] = "off"

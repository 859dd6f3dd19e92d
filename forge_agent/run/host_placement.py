"""Which host each service of a run lives on: this machine, Monarch workers, or a cluster job.

    hosts:
      kind: workers                    # local (default) | workers | slurm | kubernetes
      client_address: tcp://10.0.0.1:0 # where the controller listens (default: its hostname)
      workers:                         # kind=workers: mesh name -> worker addresses
        train: [tcp://node0:26600]
        gen:   [tcp://node1:26600]
      services: {trainer: train, generator: gen, env: local, reward: local}

    meshes = await resolve_host_meshes(cfg)   # {"train": HostMesh, "gen": HostMesh}
    ...
    meshes.release()                          # kind=slurm: scancel (unless keep_allocation)

With `kind: slurm` or `kind: kubernetes`, `nodes` maps each mesh name to a node count and the
meshes come from Monarch's own launchers (`monarch.job.SlurmJob` / `KubernetesJob`, see
`forge_agent.run.launchers`); the run cancels its Slurm job when it ends, fails or is
interrupted, unless `keep_allocation` (a later run of the same spec then reuses it). A service
not named in `services` stays on this machine (`local`).
Weights cross hosts through `forge_agent.weights.relay` (`weights_backend`: gloo or nccl); env
workers on another host run in an `EnvPoolActor` there (`forge_agent.env.remote_pool`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from forge_agent.typed_config import check_field as _check
from forge_agent.worker import parse_address

SERVICES = ("trainer", "generator", "reward", "env")
LOCAL = "local"


@dataclass
class HostsConfig:
    """Host meshes and the service -> mesh assignment (see module docstring)."""

    kind: Literal["local", "workers", "slurm", "kubernetes"] = "local"
    workers: dict[str, list[str]] = field(default_factory=dict)
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
        if self.kind == "workers":
            _check(bool(self.workers), "workers", self.workers, "mesh name -> [tcp://HOST:PORT]")
            for name, addresses in self.workers.items():
                _check(bool(addresses), f"workers.{name}", addresses, "at least one address")
                for a in addresses:
                    try:
                        parse_address(a)
                    except ValueError as e:
                        _check(False, f"workers.{name}", a, str(e))
        if self.kind in ("slurm", "kubernetes"):
            _check(bool(self.nodes), "nodes", self.nodes, "mesh name -> node count")
            for name, n in self.nodes.items():
                _check(isinstance(n, int) and n >= 1, f"nodes.{name}", n, "an int >= 1")
        trainer = self.services.get("trainer", LOCAL)
        if self.kind == "workers" and trainer in self.workers:
            _check(
                len(self.workers[trainer]) == 1,
                f"workers.{trainer}",
                self.workers[trainer],
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
        return list(self.workers if self.kind == "workers" else self.nodes)

    def mesh_of(self, service: str) -> str:
        """The mesh `service` runs on ("local": this machine)."""
        return self.services.get(service, LOCAL)

    @property
    def is_local(self) -> bool:
        return self.kind == "local" or all(self.mesh_of(s) == LOCAL for s in SERVICES)


class HostMeshes(dict):
    """Monarch `HostMesh`es by name, and the cluster job they came from (`job`, None for
    workers); `release()` gives a Slurm job's nodes back unless `keep_allocation`."""

    def __init__(self, meshes: dict[str, Any], job: Any = None, keep: bool = False) -> None:
        super().__init__(meshes)
        self.job, self.keep = job, keep

    def release(self) -> None:
        """`scancel` the Slurm job (once; a no-op for workers, Kubernetes or a kept job)."""
        job, self.job = self.job, None
        if job is not None and not self.keep:
            from forge_agent.run.launchers import release_job

            release_job(job)


async def resolve_host_meshes(cfg: HostsConfig) -> HostMeshes:
    """Monarch `HostMesh`es by name for `cfg` (empty for local). Call once per process, before
    any other Monarch call: it enables the TCP transport. Unreachable workers raise
    `forge_agent.runtime.hosts.HostUnreachableError` naming them, within `connect_timeout_s`.
    With `kind: slurm`, call `release()` on the result when the run ends."""
    from forge_agent.runtime.hosts import attach_hosts, enable_client_transport

    if cfg.kind == "local":
        return HostMeshes({})
    if cfg.kind == "workers":
        enable_client_transport(cfg.client_address)
        return HostMeshes(
            {
                name: await attach_hosts(name, addresses, cfg.connect_timeout_s)
                for name, addresses in cfg.workers.items()
            }
        )
    from forge_agent.run.launchers import job_host_meshes, kubernetes_job, slurm_job

    if cfg.kind == "kubernetes":  # pods the operator (or the user) runs: never deleted here
        job = kubernetes_job(cfg.kubernetes_namespace, cfg.nodes)
        return HostMeshes(job_host_meshes(job, cfg.mesh_names()))
    job = slurm_job(cfg.nodes, **cfg.slurm)
    return HostMeshes(job_host_meshes(job, cfg.mesh_names()), job, keep=cfg.keep_allocation)


__all__ = ["SERVICES", "HostMeshes", "HostsConfig", "resolve_host_meshes"]

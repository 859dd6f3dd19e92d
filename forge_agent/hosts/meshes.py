"""The run's hosts: this machine, Monarch host processes, or a cluster job, as host meshes by name.

    hosts:
      kind: addresses                    # local (default) | addresses | slurm | kubernetes
      client_address: tcp://10.0.0.1:0 # where the controller listens (default: its hostname)
      addresses:                       # kind=addresses: mesh name -> host addresses
        train: [tcp://node0:26600]
        gen:   [tcp://node1:26600]
      services: {trainer: train, generator: gen, env: local, reward: local}

    meshes = await resolve_host_meshes(cfg)   # {"train": HostMesh, "gen": HostMesh}
    ...
    meshes.release()                          # kind=slurm: scancel (unless keep_allocation)

With `kind: slurm` or `kind: kubernetes`, `nodes` maps each mesh name to a node count and the
meshes come from Monarch's own jobs (`monarch.job`), built by the functions at the end of this
module, which pass every Monarch option through:

    job = slurm_job({"train": 1, "gen": 2}, gpus_per_node=8, partition="gpu")
    meshes = job_host_meshes(job, ["train", "gen"])     # submits (sbatch) and waits for nodes
    release_job(job)                                    # scancel, and forget Monarch's cache

Monarch starts its host processes on the allocated nodes itself (Slurm) or finds pods already
running `python -m forge_agent.hosts.serve` / Monarch's worker (Kubernetes, label selector
`app.kubernetes.io/name=<mesh>`). The Slurm job is Monarch's `SlurmJob` through
`forge_agent.hosts.slurm` (Monarch 0.7 misreads Slurm < 24.05's `squeue --json`); the suite
runs it on a real Slurm 22.05 (`tests/test_slurm.py`). The Kubernetes job is written, not run:
no cluster here. The run cancels its Slurm job when it ends, fails or is interrupted, unless
`keep_allocation` (a later run of the same spec then reuses it). A service not named in
`services` stays on this machine (`local`). Which processes each service gets on its host is
`forge_agent.hosts.placement`. Weights cross hosts through `forge_agent.weights.relay`
(`weights_backend`: gloo or nccl); env workers on another host run in an `EnvPoolActor` there
(`forge_agent.env.remote_pool`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from forge_agent.hosts.config import LOCAL, HostsConfig

if TYPE_CHECKING:
    from monarch.actor import HostMesh
    from monarch.job import JobTrait


def weight_store_problem(hosts: HostsConfig, backend: str) -> str | None:
    """What the run's placement would refuse of `weight_store.backend=backend` on `hosts`, known
    from the config alone, so that it fails before a Slurm job is submitted or an actor starts
    (the run's config checks it when it loads; `Placement.weight_store` builds the store by
    the same rule): with the trainer and the generators on other hosts (or generators on
    several), the weights cross hosts through the relay of Monarch stores ("monarch") or
    TorchStore ("torchstore"), never an in-process store ("local"); a Kubernetes trainer
    publishes no address for the relay. What is expected, or None when it places."""
    trainer, gen = hosts.mesh_of("trainer"), hosts.mesh_of("generator")
    if trainer == gen == LOCAL or (trainer == gen and hosts.host_count(gen) == 1):
        return None
    if backend == "torchstore":
        return None
    where = f"the trainer (hosts.services.trainer: {trainer}) and generators ({gen})"
    if backend != "monarch":
        return f"'monarch' or 'torchstore' when {where} are on other hosts"
    if hosts.kind == "kubernetes" and trainer != LOCAL:
        return (
            f"'torchstore' when {where} are on other hosts and the trainer's mesh comes from a "
            "Kubernetes job, whose hosts publish no address for the cross-host relay"
        )
    return None


class HostMeshes(dict):
    """Monarch `HostMesh`es by name, and the cluster job they came from (`job`, None for
    addresses); `release()` gives a Slurm job's nodes back unless `keep_allocation`."""

    def __init__(
        self, meshes: dict[str, HostMesh], job: JobTrait | None = None, keep: bool = False
    ) -> None:
        super().__init__(meshes)
        self.job, self.keep = job, keep

    def release(self) -> None:
        """`scancel` the Slurm job (once; a no-op for addresses, Kubernetes or a kept job)."""
        job, self.job = self.job, None
        if job is not None and not self.keep:
            release_job(job)


async def resolve_host_meshes(cfg: HostsConfig) -> HostMeshes:
    """Monarch `HostMesh`es by name for `cfg` (empty for local). Call once per process, before
    any other Monarch call: it enables the TCP transport. Unreachable hosts raise
    `forge_agent.hosts.attach.HostUnreachableError` naming them, within `connect_timeout_s`.
    With `kind: slurm`, call `release()` on the result when the run ends."""
    # imported here: Monarch's client transport: +0.16 s at import, measured; only for
    # hosts.kind=addresses
    from forge_agent.hosts.attach import attach_hosts, enable_client_transport

    if cfg.kind == "local":
        return HostMeshes({})
    if cfg.kind == "addresses":
        enable_client_transport(cfg.client_address)
        return HostMeshes(
            {
                name: await attach_hosts(name, addresses, cfg.connect_timeout_s)
                for name, addresses in cfg.addresses.items()
            }
        )
    if cfg.kind == "kubernetes":  # pods the operator (or the user) runs: never deleted here
        job = kubernetes_job(cfg.kubernetes_namespace, cfg.nodes)
        return HostMeshes(job_host_meshes(job, cfg.mesh_names()))
    job = slurm_job(cfg.nodes, **cfg.slurm)
    return HostMeshes(job_host_meshes(job, cfg.mesh_names()), job, keep=cfg.keep_allocation)


# ---------------------------------------------------------------------- cluster jobs
JOB_CACHE = ".monarch/job_state.pkl"  # Monarch's default: a later run of the same spec reuses it


def slurm_job(nodes: dict[str, int], **slurm_args: Any) -> Any:
    """A `monarch.job.SlurmJob` with `nodes[mesh]` nodes per named mesh; `slurm_args` pass
    through (`gpus_per_node`, `partition`, `time_limit`, `slurm_args`, `python_exe`, ...)."""
    # imported here: Monarch's Slurm job: +0.5 s at import, measured; only for hosts.kind=slurm
    from forge_agent.hosts.slurm import CompatSlurmJob

    return CompatSlurmJob(meshes=dict(nodes), **slurm_args)


def kubernetes_job(namespace: str, nodes: dict[str, int], **mesh_args: Any) -> Any:
    """A `monarch.job.kubernetes.KubernetesJob` in `namespace` with one mesh of `nodes[mesh]`
    pods per name; `mesh_args` pass through to `add_mesh` (label_selector, image_spec, ...)."""
    from monarch.job.kubernetes import KubernetesJob

    job = KubernetesJob(namespace=namespace)
    for name, n in nodes.items():
        job.add_mesh(name, n, **mesh_args)
    return job


def job_host_meshes(job: JobTrait, names: Sequence[str]) -> dict[str, HostMesh]:
    """Bring `job` up (a no-op when Monarch's cache, `.monarch/job_state.pkl` in the working
    directory, holds a running job of the same spec) and return its host meshes by name. A
    failure or an interrupt (Ctrl-C) while it comes up releases the job."""
    try:
        state = job.state(cached_path=JOB_CACHE)
        return {name: getattr(state, name) for name in names}
    except BaseException:
        release_job(job)
        raise


def release_job(job: JobTrait) -> None:
    """Give the job's nodes back (Slurm: `scancel`) and delete Monarch's cache of it, so the
    next run neither reuses nor re-cancels it."""
    import contextlib
    import os

    try:
        job.kill()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.realpath(JOB_CACHE))


__all__ = [
    "JOB_CACHE",
    "HostMeshes",
    "job_host_meshes",
    "kubernetes_job",
    "release_job",
    "resolve_host_meshes",
    "slurm_job",
    "weight_store_problem",
]

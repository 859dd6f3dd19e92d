"""Cluster launchers: host meshes from Monarch's own jobs (`monarch.job`).

    job = slurm_job({"train": 1, "gen": 2}, gpus_per_node=8, partition="gpu")
    meshes = job_host_meshes(job, ["train", "gen"])     # submits (sbatch) and waits for nodes

    job = kubernetes_job("ml", {"train": 1, "gen": 2})  # pods labelled by the MonarchMesh operator
    meshes = job_host_meshes(job, ["train", "gen"])

Monarch starts its workers on the allocated nodes itself (Slurm) or finds pods already running
`python -m forge_agent.worker` / Monarch's worker (Kubernetes, label selector
`app.kubernetes.io/name=<mesh>`); forge-agent adds nothing to either, so every Monarch option
passes through. These need a cluster: the project's CI has none and only checks that the
jobs are built as written here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def slurm_job(nodes: dict[str, int], **slurm_args: Any) -> Any:
    """A `monarch.job.SlurmJob` with `nodes[mesh]` nodes per named mesh; `slurm_args` pass
    through (`gpus_per_node`, `partition`, `time_limit`, `slurm_args`, `python_exe`, ...)."""
    from monarch.job import SlurmJob

    return SlurmJob(meshes=dict(nodes), **slurm_args)


def kubernetes_job(namespace: str, nodes: dict[str, int], **mesh_args: Any) -> Any:
    """A `monarch.job.kubernetes.KubernetesJob` in `namespace` with one mesh of `nodes[mesh]`
    pods per name; `mesh_args` pass through to `add_mesh` (label_selector, image_spec, ...)."""
    from monarch.job.kubernetes import KubernetesJob

    job = KubernetesJob(namespace=namespace)
    for name, n in nodes.items():
        job.add_mesh(name, n, **mesh_args)
    return job


def job_host_meshes(job: Any, names: Sequence[str]) -> dict[str, Any]:
    """Bring `job` up (a no-op when it already runs) and return its host meshes by name."""
    state = job.state()
    return {name: getattr(state, name) for name in names}


__all__ = ["job_host_meshes", "kubernetes_job", "slurm_job"]

"""Cluster launchers: host meshes from Monarch's own jobs (`monarch.job`).

    job = slurm_job({"train": 1, "gen": 2}, gpus_per_node=8, partition="gpu")
    meshes = job_host_meshes(job, ["train", "gen"])     # submits (sbatch) and waits for nodes
    release_job(job)                                    # scancel, and forget Monarch's cache

    job = kubernetes_job("ml", {"train": 1, "gen": 2})  # pods labelled by the MonarchMesh operator
    meshes = job_host_meshes(job, ["train", "gen"])

Monarch starts its workers on the allocated nodes itself (Slurm) or finds pods already running
`python -m forge_agent.worker` / Monarch's worker (Kubernetes, label selector
`app.kubernetes.io/name=<mesh>`); forge-agent adds nothing to either, so every Monarch option
passes through. The Slurm job is Monarch's `SlurmJob` through `forge_agent.run.slurm_compat`
(Monarch 0.7 misreads Slurm < 24.05's `squeue --json`); the suite runs it on a real Slurm
22.05 (`tests/test_slurm.py`). The Kubernetes job is written, not run: no cluster here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def slurm_job(nodes: dict[str, int], **slurm_args: Any) -> Any:
    """A `monarch.job.SlurmJob` with `nodes[mesh]` nodes per named mesh; `slurm_args` pass
    through (`gpus_per_node`, `partition`, `time_limit`, `slurm_args`, `python_exe`, ...)."""
    from forge_agent.run.slurm_compat import CompatSlurmJob

    return CompatSlurmJob(meshes=dict(nodes), **slurm_args)


def kubernetes_job(namespace: str, nodes: dict[str, int], **mesh_args: Any) -> Any:
    """A `monarch.job.kubernetes.KubernetesJob` in `namespace` with one mesh of `nodes[mesh]`
    pods per name; `mesh_args` pass through to `add_mesh` (label_selector, image_spec, ...)."""
    from monarch.job.kubernetes import KubernetesJob

    job = KubernetesJob(namespace=namespace)
    for name, n in nodes.items():
        job.add_mesh(name, n, **mesh_args)
    return job


def job_host_meshes(job: Any, names: Sequence[str]) -> dict[str, Any]:
    """Bring `job` up (a no-op when Monarch's cache, `.monarch/job_state.pkl` in the working
    directory, holds a running job of the same spec) and return its host meshes by name. A
    failure or an interrupt (Ctrl-C) while it comes up releases the job."""
    try:
        state = job.state(cached_path=JOB_CACHE)
        return {name: getattr(state, name) for name in names}
    except BaseException:
        release_job(job)
        raise


def release_job(job: Any) -> None:
    """Give the job's nodes back (Slurm: `scancel`) and delete Monarch's cache of it, so the
    next run neither reuses nor re-cancels it."""
    import contextlib
    import os

    try:
        job.kill()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.realpath(JOB_CACHE))


JOB_CACHE = ".monarch/job_state.pkl"  # Monarch's default: a later run of the same spec reuses it

__all__ = ["JOB_CACHE", "job_host_meshes", "kubernetes_job", "release_job", "slurm_job"]

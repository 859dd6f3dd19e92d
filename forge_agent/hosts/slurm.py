"""Monarch 0.7's `SlurmJob` on the Slurm versions users have: the compatibility layer
`hosts.kind: slurm` runs `monarch.job.SlurmJob` through.

Why it exists: Monarch 0.7 finds a job's state and nodes by parsing `squeue --job N --json` in
Slurm >= 24.05's layout (`jobs[0].job_state`, `jobs[0].job_resources.nodes.allocation[].name`).
Slurm 22.05 (Debian 12; Ubuntu 22.04 and 24.04 ship 21.08 to 23.11) answers in another layout:
`job_resources.nodes` is a string (`"sn[1-3]"`) and the nodes are listed under
`job_resources.allocated_nodes[].nodename`, so Monarch raises `AttributeError: 'str' object
has no attribute 'get'` once the job runs. Worse, 22.05's `--json` ignores the job filter:
`squeue --job 4 --json` lists every job, so `jobs[0]` can be another user's job.

What it does, without editing or patching the installed package: `CompatSlurmJob` subclasses
`SlurmJob` and answers the one query Monarch asks (`_get_job_info_json(job_id)`) from the
columns every Slurm since 2.x prints the same way: `squeue --jobs N --noheader --format
%T|%N` (this job's own state and node list, nothing else's) and `scontrol show hostnames
LIST` (the node list expanded, in Slurm's node order, which is the order Monarch gives the
meshes their hosts in). It hands Monarch that answer in the >= 24.05 layout Monarch reads,
so submitting, waiting, attaching, caching and `scancel` stay Monarch's own. On Slurm >=
24.05 the answer is the same as the one Monarch would have parsed, and the job filter holds.

It refuses (`SlurmCompatError`) a Monarch whose `SlurmJob` no longer has that query: the
override would silently do nothing and Monarch's own parsing run again.

Delete it when a Monarch release reads the job's nodes without `--json`'s layout (or with
both layouts and the job filter checked); then `forge_agent.hosts.meshes.slurm_job` builds
`monarch.job.SlurmJob` directly. Checked against torchmonarch 0.7.0 and slurm-wlm 22.05.8.
"""

from __future__ import annotations

import logging
import subprocess
from typing import Any

from monarch.job import SlurmJob

logger = logging.getLogger(__name__)
QUERY = "_get_job_info_json"  # the SlurmJob method this layer answers


class SlurmCompatError(RuntimeError):
    """This Monarch's `SlurmJob` lacks the query the layer replaces."""


def job_info(job_id: str) -> dict[str, Any] | None:
    """Job `job_id`'s state and nodes in Slurm >= 24.05's `squeue --json` layout (the part
    Monarch reads), or None when squeue no longer lists it."""
    done = _run(["squeue", "--jobs", job_id, "--noheader", "--format", "%T|%N"])
    if done.returncode != 0 or not done.stdout.strip():  # finished and purged, or unknown
        return None
    state, _, nodelist = done.stdout.strip().splitlines()[0].partition("|")
    return {
        "job_id": int(job_id),
        "job_state": [state],
        "job_resources": {"nodes": {"allocation": [{"name": n} for n in hostnames(nodelist)]}},
    }


def hostnames(nodelist: str) -> list[str]:
    """Slurm's node list expression expanded (`"sn[1-3]"` -> sn1, sn2, sn3); empty for a
    job that has no nodes yet."""
    if not nodelist.strip() or nodelist.strip() == "(null)":
        return []
    done = _run(["scontrol", "show", "hostnames", nodelist])
    if done.returncode != 0:
        raise RuntimeError(f"scontrol show hostnames {nodelist!r}: {done.stderr.strip()}")
    return done.stdout.split()


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


class CompatSlurmJob(SlurmJob):
    """`monarch.job.SlurmJob` whose job queries work on Slurm 22.05 to the newest (see the
    module docstring). Takes `SlurmJob`'s arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not callable(getattr(SlurmJob, QUERY, None)):
            raise SlurmCompatError(
                f"monarch.job.SlurmJob has no {QUERY}() (the query "
                "forge_agent/hosts/slurm.py answers); this Monarch is newer than the "
                "layer: check whether it reads Slurm 22.05's squeue, then drop the layer"
            )
        super().__init__(*args, **kwargs)

    def _get_job_info_json(self, job_id: str) -> dict[str, Any] | None:
        try:
            return job_info(job_id)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            logger.warning("slurm job %s: %s", job_id, e)
            return None


__all__ = ["CompatSlurmJob", "SlurmCompatError", "hostnames", "job_info"]

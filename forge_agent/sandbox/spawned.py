"""Renewing a long-lived sandboxed process between episodes (a warm MCP server).

A process that outlives its episode (`SandboxSession.spawn`) keeps what the episode left in
its private `/tmp` and the CPU time it spent: the next episode could read the first one's
files there, or start with its CPU budget (RLIMIT_CPU counts the process's whole life) burnt.
`renew_process_tree` gives it a clean slate without a restart: its `/tmp` emptied from the host
(through `/proc/PID/root`, never following a link) and its CPU limit moved past the time it has
used, so every episode gets the full budget (where the host may not raise it, a process with
less than half its budget left is refused: the caller restarts it).
"""

from __future__ import annotations

import math
import os
import resource
from pathlib import Path

from forge_agent.sandbox.tree_removal import empty_folder

__all__ = ["renew_process_tree"]


def renew_process_tree(pids: list[int], cpu_s: float) -> None:
    """Empty the private `/tmp` of each mount namespace among `pids` and give each process
    `cpu_s` CPU seconds from now (soft and hard RLIMIT_CPU raised by what it used).

    Raises:
        OSError: a process could not be renewed (it is gone, or this host may not raise its
            limit): the caller should restart it instead.
    """
    host_tmp = os.stat("/tmp").st_dev
    cleared: set[int] = set()
    for pid in pids:
        tmp = f"/proc/{pid}/root/tmp"
        device = os.stat(tmp).st_dev
        if device != host_tmp and device not in cleared:  # the sandbox's own tmpfs
            empty_folder(tmp)
            cleared.add(device)
        _renew_cpu(pid, cpu_s)


def _renew_cpu(pid: int, cpu_s: float) -> None:
    """`cpu_s` more CPU seconds for `pid`: its RLIMIT_CPU raised past what it has used. A host
    that may not raise another user's limit (no CAP_SYS_RESOURCE) keeps a process only while
    at least half its budget is left, so every episode it serves gets `cpu_s / 2` or more."""
    soft, hard = _cpu_limit(pid)
    if soft == resource.RLIM_INFINITY:
        return
    used = _cpu_seconds(pid)
    wanted = math.ceil(used + cpu_s)
    if wanted <= soft:
        return
    new_hard = hard if hard == resource.RLIM_INFINITY else wanted + (hard - soft)
    try:
        resource.prlimit(pid, resource.RLIMIT_CPU, (wanted, new_hard))
    except PermissionError:
        if soft - used < cpu_s / 2:
            raise OSError(
                f"process {pid} has used {used:.1f} of its {soft} CPU seconds and its limit "
                "cannot be raised here (no CAP_SYS_RESOURCE): restart it"
            ) from None


def _cpu_limit(pid: int) -> tuple[int, int]:
    """`pid`'s RLIMIT_CPU (soft, hard), read from /proc/PID/limits (readable where prlimit's
    query is not: another user namespace's process)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max cpu time"):
            soft, hard = line.split()[3:5]
            return tuple(
                resource.RLIM_INFINITY if v == "unlimited" else int(v) for v in (soft, hard)
            )  # type: ignore[return-value]
    return resource.RLIM_INFINITY, resource.RLIM_INFINITY


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds `pid` has used (from /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

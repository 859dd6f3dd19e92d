"""Kills a vLLM engine's processes once the process that owns them has died.

vLLM runs its engine core and workers in child processes. When the generator's process is
killed outright (SIGKILL, the OOM killer), they are re-parented to init and live on, holding
memory (seen here after killing a training run). The generator starts this watchdog in a
session of its own, so it outlives a kill of the generator's process group:

    python .../forge_agent/generator/reaper.py OWNER_PID PID:CREATE_TIME ...

It runs as a script, not `-m forge_agent.generator.reaper`: that would import the generator
package (torch), about 150 MB for a process that only waits. It waits on a pidfd (no polling).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import psutil


def watch_engine(owner_pid: int | None = None) -> subprocess.Popen | None:
    """Start a watchdog for the vLLM processes below `owner_pid` (default: this process)."""
    owner = psutil.Process(owner_pid or os.getpid())
    engine = [p for p in owner.children(recursive=True) if _is_vllm(p)]
    if not engine:
        return None
    args = [f"{p.pid}:{p.create_time()}" for p in engine]
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(owner.pid), *args],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _is_vllm(proc: psutil.Process) -> bool:
    try:
        return proc.name().startswith("VLLM") or "VLLM::" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def main(argv: list[str]) -> None:
    owner_pid, targets = int(argv[0]), [a.split(":") for a in argv[1:]]
    _wait_for_exit(owner_pid)
    for pid, created in targets:
        try:
            proc = psutil.Process(int(pid))
            if abs(proc.create_time() - float(created)) < 1e-3:  # not a reused pid
                proc.kill()
        except psutil.Error:
            continue  # already gone: the engine shut down with its owner


def _wait_for_exit(pid: int) -> None:
    """Block until process `pid` has exited (a pidfd where the kernel has them, else polling)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd support, or already gone
        while psutil.pid_exists(pid):
            time.sleep(0.5)
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Optional cgroup v1 memory and pids limits for a whole sandbox (used when running as root).

rlimits bound each process; a cgroup bounds the sandbox as a whole (a fork bomb of 64 processes
cannot take 64 x ``memory_mb``) and tells us when the kernel's OOM killer struck. Everything here
is best effort: `SandboxCgroup.create` returns None where cgroup v1 is not writable (not root,
cgroup v2 only), and the rlimits still apply.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
import time
from pathlib import Path

from forge_agent.sandbox import janitor

__all__ = ["SandboxCgroup"]

_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "pids")
_counter = itertools.count()
_pending: set[SandboxCgroup] = set()
_pending_lock = threading.Lock()
SUPERVISOR_MEMORY_MB = 48
"""Memory allowed on top of ``Limits.memory_mb`` for the supervisor and tmpfs metadata."""


def _own_path(controller: str) -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


class SandboxCgroup:
    """One memory cgroup and one pids cgroup holding every process of one sandbox."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls) -> SandboxCgroup | None:
        """Make the cgroups under this process's own ones, or return None if impossible."""
        if os.geteuid() != 0:
            return None
        name = f"forge-sandbox-{os.getpid()}-{next(_counter)}"
        dirs: dict[str, Path] = {}
        try:
            for controller in _CONTROLLERS:
                own = _own_path(controller)
                base = _ROOT / controller
                if own is None or not (base / "cgroup.procs").exists():
                    raise OSError(f"no cgroup v1 {controller} hierarchy")
                parent = base / own.lstrip("/")
                _remove_stale(parent)
                path = parent / name
                janitor.watch("cgroup", str(path))  # before it exists (a kill may come any time)
                path.mkdir()
                dirs[controller] = path
        except OSError:
            cls(dirs).remove()
            return None
        return cls(dirs)

    def set_limits(self, memory_mb: int, max_procs: int) -> None:
        """Bound the whole sandbox: memory (no swap) and process count."""
        limit = str((memory_mb + SUPERVISOR_MEMORY_MB) * 1024 * 1024)
        memory = self.dirs["memory"]
        # memsw must stay >= limit, so one of the first two writes may fail; the third fixes it.
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            with contextlib.suppress(OSError):
                (memory / name).write_text(limit)
        with contextlib.suppress(OSError):
            (memory / "memory.limit_in_bytes").write_text(limit)
        (self.dirs["pids"] / "pids.max").write_text(str(max_procs + 4))

    def add(self, pid: int) -> None:
        """Move `pid` into the sandbox's cgroups (its later children follow)."""
        for path in self.dirs.values():
            (path / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """How many times the OOM killer struck in this cgroup so far."""
        try:
            text = (self.dirs["memory"] / "memory.oom_control").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove_later(self) -> None:
        """Remove in a background thread (rmdir waits for the dying processes); at exit, wait."""
        with _pending_lock:
            _pending.add(self)

        def work() -> None:
            self.remove()
            with _pending_lock:
                _pending.discard(self)

        threading.Thread(target=work, daemon=True).start()

    def remove(self, timeout_s: float = 2.0) -> None:
        """Delete the cgroups once their processes are gone (best effort)."""
        deadline = time.monotonic() + timeout_s
        for path in self.dirs.values():
            while True:
                try:
                    path.rmdir()
                    janitor.forget("cgroup", str(path))
                    break
                except FileNotFoundError:
                    janitor.forget("cgroup", str(path))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)


def _remove_stale(parent: Path) -> None:
    """rmdir empty sandbox cgroups left by processes that no longer exist."""
    for path in parent.glob("forge-sandbox-*"):
        pid = path.name.split("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            with contextlib.suppress(OSError):
                path.rmdir()


@atexit.register
def _remove_pending() -> None:
    with _pending_lock:
        pending = list(_pending)
    for cgroup in pending:
        cgroup.remove()

"""Admission control: a host-wide budget of sandbox memory, shared by every process.

Each live sandbox reserves its limits (``memory_mb`` plus its workspace quota, which lives in
memory as a tmpfs) in a ledger folder under ``/dev/shm`` (one file per reservation, named with
the owning pid, so reservations of killed processes are dropped). A new sandbox whose
reservation would take the total past the budget waits for others to finish, up to
``timeout_s``, then is refused with a `SandboxError` that names the numbers; one that can never
fit is refused at once.

The budget: ``FORGE_SANDBOX_MEMORY_BUDGET_MB`` when set, else 80% of the memory this host (or
this process's memory cgroup, when smaller) has.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
import uuid
import weakref

from forge_agent.sandbox.base import Limits, SandboxError

__all__ = ["Reservation", "default_budget_mb", "reserve", "reserve_for", "room_mb"]

BUDGET_ENV = "FORGE_SANDBOX_MEMORY_BUDGET_MB"
LEDGER_ENV = "FORGE_SANDBOX_LEDGER"
"""A different ledger folder (a separate budget), e.g. for tests."""
POLL_S = 0.05


def _ledger_dir() -> str:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    path = os.environ.get(LEDGER_ENV) or os.path.join(base, "forge-sandbox-admission")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def default_budget_mb() -> int:
    """The host-wide budget in MB (see the module docstring)."""
    if os.environ.get(BUDGET_ENV):
        try:
            return int(os.environ[BUDGET_ENV])
        except ValueError:
            raise ValueError(
                f"{BUDGET_ENV} must be a whole number of MB, got {os.environ[BUDGET_ENV]!r}"
            ) from None
    total = 0
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) // 1024
    for path in ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"):
        with contextlib.suppress(OSError, ValueError):
            with open(path) as f:
                limit = int(f.read().strip()) // (1024 * 1024)
            if 0 < limit < (total or limit + 1):
                total = limit
    return max(1, int(0.8 * total)) if total else 16_384


class Reservation:
    """One sandbox's share of the budget; `release()` (or collection) gives it back."""

    def __init__(self, path: str, memory_mb: int) -> None:
        self.path = path
        self.memory_mb = memory_mb
        self._finalizer = weakref.finalize(self, _unlink, path)

    def release(self) -> None:
        """Give the memory back (idempotent)."""
        self._finalizer()


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _in_use(ledger: str) -> tuple[int, int]:
    """(MB reserved by live processes, their number of sandboxes); drops dead owners' files."""
    total, count = 0, 0
    for name in os.listdir(ledger):
        parts = name.split("-")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit():
            continue
        if not os.path.exists(f"/proc/{parts[0]}"):
            _unlink(os.path.join(ledger, name))
            continue
        total += int(parts[2])
        count += 1
    return total, count


def room_mb(budget_mb: int | None = None) -> int:
    """MB of the host-wide budget not reserved by live sandboxes now (may be negative)."""
    budget = default_budget_mb() if budget_mb is None else int(budget_mb)
    ledger = _ledger_dir()
    with open(os.path.join(ledger, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used, _ = _in_use(ledger)
    return budget - used


def reserve(memory_mb: int, budget_mb: int | None = None, timeout_s: float = 30.0) -> Reservation:
    """Reserve `memory_mb` of the host-wide budget, waiting up to `timeout_s` for room.

    Raises:
        SandboxError: the request exceeds the whole budget, or no room came in time.
    """
    budget = default_budget_mb() if budget_mb is None else int(budget_mb)
    memory_mb = int(memory_mb)
    if memory_mb > budget:
        raise SandboxError(
            f"a sandbox with {memory_mb} MB of limits (memory + workspace) can never fit the "
            f"host's sandbox memory budget of {budget} MB (set {BUDGET_ENV} or lower the limits)"
        )
    ledger = _ledger_dir()
    deadline = time.monotonic() + timeout_s
    while True:
        with open(os.path.join(ledger, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used, count = _in_use(ledger)
            if used + memory_mb <= budget:
                path = os.path.join(ledger, f"{os.getpid()}-{uuid.uuid4().hex}-{memory_mb}")
                with open(path, "w"):
                    pass
                return Reservation(path, memory_mb)
        if time.monotonic() >= deadline:
            raise SandboxError(
                f"the host's sandbox memory budget of {budget} MB is full: {used} MB reserved "
                f"by {count} live sandboxes, {memory_mb} MB more requested; waited "
                f"{timeout_s:g} s (set {BUDGET_ENV} or run fewer sandboxes at once)"
            )
        time.sleep(POLL_S)


def reserve_for(limits: Limits, budget_mb: int | None, timeout_s: float) -> Reservation:
    """Reserve what a sandbox with `limits` may hold: its memory and its workspace."""
    return reserve(limits.memory_mb + limits.workspace_mb, budget_mb, timeout_s)

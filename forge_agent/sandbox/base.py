"""The sandbox interface: limits, results, and the one-shot / session seams every backend fills.

Failure policy (the same for every backend):
- What the *sandboxed code* does (crash, exceed a limit, kill its own supervisor, flood output)
  always comes back as a `RunResult`; the host and the next call are unaffected.
- A supervisor that fails after the code started counts as the code's failure (a `RunResult`
  saying so, `supervisor_failed_after_code`): the code shares its uid and may have caused it.
- What goes wrong with the *sandbox itself* (bubblewrap missing, the Docker engine gone, a
  sandbox that cannot start) raises `SandboxError` with a message that names the cause, so the
  caller can mark the episode as an infrastructure failure instead of blaming the policy.
- A session whose sandbox died (killed by its code, by the wall-time backstop or by the OOM
  killer) reports that run in its `RunResult` (stderr says so) and restarts transparently on the
  next call, keeping the workspace files.
"""

from __future__ import annotations

import abc
import binascii
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Protocol, Self

from forge_agent.errors import InfraError
from forge_agent.sandbox.tree_removal import empty_folder
from forge_agent.sandbox.workspace_files import (  # re-exported: the sandbox interface's names
    WORKSPACE,
    FileData,
    host_read_file,
    host_write_file,
    normalize_workspace_path,
)

__all__ = [
    "WORKSPACE",
    "FileData",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SandboxSession",
    "normalize_workspace_path",
    "supervisor_failed_after_code",
]

MAX_OUTPUT_BYTES = 16 << 20
"""The largest `Limits.output_bytes`: the supervisor holds stdout and stderr in memory and
returns both in one reply (see `reply_max_bytes`)."""


class SandboxError(InfraError):
    """The sandbox itself failed (not the code it ran): missing tool, dead engine, no start.
    Infra (`forge_agent.errors.InfraError`): an episode it ends is excluded, not scored."""


READ_FILE_MAX_BYTES = 1_000_000  # the most `read_file` returns


@dataclass(frozen=True)
class Limits:
    """Resource limits for one execution.

    Attributes:
        wall_s: wall-clock seconds before the whole execution (every process it started) is killed.
        cpu_s: CPU seconds per process (RLIMIT_CPU; SIGXCPU at the limit).
        memory_mb: address space per process (RLIMIT_AS) and, where the backend has a memory
            cgroup / Docker ``mem_limit``, the memory of the whole sandbox.
        max_procs: processes the sandboxed user may have (RLIMIT_NPROC / pids cgroup / pids_limit).
        file_size_mb: largest file a process may write (RLIMIT_FSIZE); also bounds ``/tmp``.
        output_bytes: stdout and stderr are each kept up to this many bytes, the rest dropped
            (at most `MAX_OUTPUT_BYTES`).
        network: False (default) gives the sandbox no network at all, not even loopback to the host.
            True gives outbound access from a network namespace of the sandbox's own (Docker's
            bridge); the bwrap backend refuses it (it could only share the host's).
        workspace_mb: bytes the whole workspace may hold (a session's limit, fixed at its
            start; enforced where the host may mount a tmpfs per workspace, i.e. as root).
        workspace_files: files and folders the whole workspace may hold (same conditions).

    A sandbox reserves ``memory_mb + workspace_mb`` of the host-wide sandbox memory budget
    while it lives (`forge_agent.sandbox.admission`). A workspace on tmpfs lives in memory:
    what the code writes there also counts against the sandbox's memory cgroup.
    """

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 512
    max_procs: int = 64
    file_size_mb: int = 64
    output_bytes: int = 64_000
    network: bool = False
    workspace_mb: int = 256
    workspace_files: int = 20_000

    def __post_init__(self) -> None:
        for name in (
            "wall_s",
            "cpu_s",
            "memory_mb",
            "max_procs",
            "file_size_mb",
            "output_bytes",
            "workspace_mb",
            "workspace_files",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if self.output_bytes > MAX_OUTPUT_BYTES:
            raise ValueError(
                f"Limits.output_bytes must be at most {MAX_OUTPUT_BYTES} (stdout and stderr are "
                f"each held in the supervisor's memory and sent back in one reply), "
                f"got {self.output_bytes!r}"
            )

    def with_(self, **changes: object) -> Limits:
        """A copy with some fields changed, e.g. ``limits.with_(wall_s=2)``."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        return {
            "wall_s": float(self.wall_s),
            "cpu_s": float(self.cpu_s),
            "memory_mb": int(self.memory_mb),
            "max_procs": int(self.max_procs),
            "file_size_mb": int(self.file_size_mb),
            "output_bytes": int(self.output_bytes),
            "network": bool(self.network),
            "workspace_mb": int(self.workspace_mb),
            "workspace_files": int(self.workspace_files),
        }


@dataclass
class RunResult:
    """What one execution did.

    Attributes:
        stdout: captured standard output (UTF-8, undecodable bytes replaced), at most
            ``Limits.output_bytes`` bytes.
        stderr: captured standard error, same bound; sandbox notes (timeouts, a killed sandbox)
            are appended after a ``[sandbox]`` prefix.
        exit_code: the process's exit status, or None when it was killed by a signal.
        signal: the signal that killed it (e.g. 9), or None.
        timed_out: the wall-time or CPU-time limit was hit.
        oom: the run ran out of memory (MemoryError / allocation failure / OOM kill).
        duration_s: wall-clock seconds of the whole call as the caller saw it.
        truncated: some stdout or stderr beyond ``Limits.output_bytes`` was dropped.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    signal: int | None
    timed_out: bool
    oom: bool
    duration_s: float
    truncated: bool

    @property
    def ok(self) -> bool:
        """True when the code exited with status 0 within its limits."""
        return self.exit_code == 0 and not self.timed_out and not self.oom

    def describe(self) -> str:
        """One line saying how the run ended, e.g. ``exit code 1`` or ``timed out (wall 2s)``."""
        if self.timed_out:
            return "timed out"
        if self.oom:
            return "out of memory"
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        return f"exit code {self.exit_code}"


def reply_max_bytes(limits: Limits) -> int:
    """The longest reply a supervisor sends for a run under `limits`: stdout and stderr of up
    to ``output_bytes`` each, in base64, plus the other fields."""
    return 2 * 4 * -(-int(limits.output_bytes) // 3) + 65536


def output_memory_mb(limits: Limits) -> int:
    """Memory (MB) the supervisor needs for a run's output: both buffers, then their base64."""
    return -(-6 * int(limits.output_bytes) // (1 << 20))


def result_from_reply(reply: Mapping[str, object], duration_s: float, oom: bool) -> RunResult:
    """The `RunResult` of a supervisor's reply (output as base64 of the raw bytes, decoded here
    as UTF-8 with undecodable bytes replaced); `oom` adds what the host saw (an OOM kill)."""
    stdout, stderr = (
        binascii.a2b_base64(str(reply[key])).decode("utf-8", "replace")
        for key in ("stdout_b64", "stderr_b64")
    )
    return RunResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=reply["exit_code"],  # type: ignore[arg-type]
        signal=reply["signal"],  # type: ignore[arg-type]
        timed_out=bool(reply["timed_out"]),
        oom=bool(reply["memory_error"]) or oom,
        duration_s=duration_s,
        truncated=bool(reply["truncated"]),
    )


def supervisor_failed_after_code(error: str, duration_s: float) -> RunResult:
    """The result of a run whose supervisor failed after the code had started.

    The code shares the supervisor's uid, so such a failure may be the code's doing (starving
    it of memory, descriptors, ...): it counts as the code's failure, never as the sandbox's
    (a `SandboxError` would end the episode as an infrastructure failure, which training
    leaves out: a way for a wrong answer to escape its reward of 0).
    """
    return RunResult(
        stdout="",
        stderr=(
            f"[sandbox] the supervisor failed after the code started ({error}); counted as the "
            "code's failure (code can interfere with its supervisor)\n"
        ),
        exit_code=None,
        signal=9,
        timed_out=False,
        oom=False,
        duration_s=duration_s,
        truncated=False,
    )


class SandboxSession(abc.ABC):
    """A persistent per-episode workspace: files survive between runs, processes do not.

    After every run all processes the run started are killed, so nothing runs between calls.
    Use as a context manager, or call `close()`.
    """

    limits: Limits

    @abc.abstractmethod
    def run(
        self,
        code: str | None = None,
        argv: list[str] | None = None,
        files: Mapping[str, FileData] | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Write `files` into the workspace, then run Python `code` or the command `argv`."""

    @abc.abstractmethod
    def write_file(self, path: str, data: FileData) -> None:
        """Write a file in the workspace (relative path; parents are created)."""

    @abc.abstractmethod
    def read_file(self, path: str) -> str:
        """Read a workspace file as UTF-8 text (undecodable bytes replaced)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop the sandbox and delete the workspace. Idempotent."""

    def clear_workspace(self) -> None:
        """Delete every file and folder in the workspace (processes keep running), so the
        session can serve a next episode that must not see this one's files.

        Raises:
            SandboxError: when the backend cannot clear its workspace.
        """
        raise SandboxError(f"{type(self).__name__} cannot clear its workspace")

    def renew_spawned(self) -> None:
        """Give the processes `spawn` started a clean slate for a new episode (their private
        `/tmp` emptied, their CPU budget renewed), so state cannot cross episodes.

        Raises:
            SandboxError: the backend cannot (the caller restarts the processes instead).
        """
        raise SandboxError(f"{type(self).__name__} cannot renew the processes it spawned")

    def spawn(
        self,
        argv: list[str],
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a long-lived process (e.g. a tool server) in this session's sandbox.

        The process sees the session's workspace (at ``/workspace``, its working directory),
        the same read-only system files, no network unless the session has it, and the rlimits
        of `limits` (default: the session's; its `wall_s` does not apply: the process lives
        until it exits, the caller kills it, or the session closes). Its stdin, stdout and
        stderr are pipes held by the caller; keep reading stdout and stderr. Runs of `run` do
        not kill it. `env` adds environment variables.

        Raises:
            SandboxError: when the backend cannot start long-lived processes or the start fails.
        """
        raise SandboxError(f"{type(self).__name__} cannot spawn long-lived processes")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Releasable(Protocol):
    """What a session holds until it closes (its share of the memory budget, `admission`)."""

    def release(self) -> None: ...


class WorkspaceSession(SandboxSession):
    """A session whose workspace is a host folder: files are written and read on the host
    side (symlinks never followed); `run` checks the request, writes `files` and hands over to
    the backend's `_execute` under the session lock."""

    workspace: str

    def __init__(self, backend: Sandbox, limits: Limits) -> None:
        self.backend = backend
        self.limits = limits
        self.restarts = 0
        self._lock = threading.Lock()
        self._closed = False

    def _open(self, reservation: Releasable, make_workspace: Callable[[], str]) -> None:
        """Hold `reservation` (released by `close`), make the workspace, then `_start`; what
        was taken is given back when a part fails."""
        self._reservation = reservation
        try:
            self.workspace = make_workspace()
        except BaseException:
            reservation.release()
            raise
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    @abc.abstractmethod
    def _start(self) -> None:
        """Start the sandbox (its process or container) over the workspace."""

    @property
    @abc.abstractmethod
    def _file_owner(self) -> tuple[int, int] | None:
        """The (uid, gid) that should own files written into the workspace, or None."""

    @abc.abstractmethod
    def _execute(
        self, code: str | None, argv: list[str] | None, limits: Limits, start: float
    ) -> RunResult:
        """Run one request in the started sandbox (called with the lock held)."""

    def write_file(self, path: str, data: FileData) -> None:
        """Write a workspace file (relative path; parents created; symlinks never followed)."""
        self._check_open()
        host_write_file(self.workspace, path, data, owner=self._file_owner)

    def read_file(self, path: str) -> str:
        """Read a workspace file as text (at most 1 MB; symlinks never followed)."""
        self._check_open()
        return host_read_file(self.workspace, path, READ_FILE_MAX_BYTES)

    def clear_workspace(self) -> None:
        """Delete everything in the workspace (never through a symlink; the folder is kept)."""
        with self._lock:
            self._check_open()
            empty_folder(self.workspace)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox session is closed")

    def run(
        self,
        code: str | None = None,
        argv: list[str] | None = None,
        files: Mapping[str, FileData] | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Write `files`, then run Python `code` or the command `argv` in the workspace."""
        check_request(code, argv)
        limits = limits or self.limits
        if limits.network != self.limits.network:
            raise ValueError(
                f"limits.network={limits.network} differs from the session's "
                f"network={self.limits.network}; start a session with the network setting"
            )
        with self._lock:
            self._check_open()
            start = time.monotonic()
            for path, data in (files or {}).items():
                host_write_file(self.workspace, path, data, owner=self._file_owner)
            return self._execute(code, argv, limits, start)


class Sandbox(abc.ABC):
    """A sandbox backend: fresh isolated runs and persistent sessions."""

    name: str = "sandbox"

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    @abc.abstractmethod
    def session(self, limits: Limits | None = None) -> SandboxSession:
        """Start a persistent sandbox with its own workspace (default limits for its runs)."""

    def run(
        self,
        code: str | None = None,
        argv: list[str] | None = None,
        files: Mapping[str, FileData] | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """One execution in a fresh sandbox that is torn down afterwards."""
        with self.session(limits) as session:
            return session.run(code=code, argv=argv, files=files, limits=limits)

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release backend resources (idempotent)."""


def check_request(code: str | None, argv: list[str] | None) -> None:
    """Exactly one of `code` and `argv` must be given."""
    if (code is None) == (argv is None):
        raise ValueError("give exactly one of code= (Python source) or argv= (a command)")
    if argv is not None and (not argv or not all(isinstance(a, str) for a in argv)):
        raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")

"""Bubblewrap backend: unprivileged Linux namespaces, no daemon.

Each sandbox is one ``bwrap`` process whose PID 1 is the supervisor
(`forge_agent.sandbox.supervisor`) running on the system Python. Its command line
(`forge_agent.sandbox.bwrap_command`) says what it sees: a read-only ``/usr``, private ``/proc``,
``/dev`` and ``/tmp``, one writable ``/workspace``, a new and empty network namespace
(``Limits(network=True)`` is refused, `NETWORK_REFUSED` says why), uid/gid 65534. When the host
process is root, bubblewrap itself is started as host uid 65534 too, so nothing in the sandbox
maps to host root and RLIMIT_NPROC is enforced.

A session keeps its sandbox (and so a warm interpreter) between runs: each run is one fork of the
supervisor. A one-shot `BubblewrapSandbox.run` is a session of one run.

Hardening against the code taking over its supervisor (same uid): a seccomp filter
(`forge_agent.sandbox.seccomp`, ``--seccomp FD``) denies ptrace, process_vm_*, new namespaces,
AF_VSOCK and more; the supervisor is undumpable; every reply carries the request's id. The
supervisor reports its hardening in its ready line and the session refuses to start
(`SandboxError`) when any step did not take effect.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from forge_agent.sandbox.admission import Reservation, reserve_for
from forge_agent.sandbox.base import (
    WORKSPACE,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    WorkspaceSession,
    check_request,
    output_memory_mb,
    reply_max_bytes,
    result_from_reply,
    supervisor_failed_after_code,
)
from forge_agent.sandbox.bwrap_command import NETWORK_REFUSED, SANDBOX_ID, bwrap_command
from forge_agent.sandbox.cgroups import SandboxCgroup
from forge_agent.sandbox.seccomp import bwrap_filter
from forge_agent.sandbox.spawned import renew_process_tree
from forge_agent.sandbox.supervisor_host import SUPERVISOR_SOURCE, hardening_problem
from forge_agent.sandbox.workspace import Workspace

__all__ = ["BubblewrapSandbox", "BubblewrapSession"]

START_TIMEOUT_S = 30.0
BACKSTOP_GRACE_S = 2.0
REPLY_TOO_LONG = "reply too long"


class BubblewrapSandbox(Sandbox):
    """Sandboxes made with bubblewrap.

    Args:
        limits: default limits for runs that pass none.
        python: interpreter inside the sandbox; it must live under a bound directory (``/usr``).
        bwrap: the bubblewrap binary.
        workspace_root: host directory under which per-session workspaces are created.
        ro_binds: extra host paths to bind read-only at the same place.
        use_cgroups: None (default) uses cgroup v1 memory/pids limits when available (root).
        memory_budget_mb: the host-wide sandbox memory budget (default: see
            `forge_agent.sandbox.admission`); a sandbox that does not fit waits, then is refused.
        admission_timeout_s: how long a new sandbox waits for room in the budget.
    """

    name = "bwrap"

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        python: str = "/usr/bin/python3",
        bwrap: str = "bwrap",
        workspace_root: str | None = None,
        ro_binds: Sequence[str] = (),
        use_cgroups: bool | None = None,
        memory_budget_mb: int | None = None,
        admission_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(limits)
        if self.limits.network:
            raise SandboxError(NETWORK_REFUSED)
        self.memory_budget_mb = memory_budget_mb
        self.admission_timeout_s = admission_timeout_s
        found = shutil.which(bwrap)
        if found is None:
            raise SandboxError(
                f"bubblewrap executable {bwrap!r} not found on PATH "
                "(install the Debian package 'bubblewrap')"
            )
        if not os.path.isfile(python) or not os.access(python, os.X_OK):
            raise SandboxError(
                f"sandbox python {python!r} does not exist or is not executable "
                "(install the Debian package 'python3-minimal')"
            )
        self.bwrap = found
        self.python = python
        self.workspace_root = workspace_root
        self.ro_binds = tuple(ro_binds)
        self.use_cgroups = use_cgroups
        self.drop_to = (SANDBOX_ID, SANDBOX_ID) if os.geteuid() == 0 else None

    def reserve(self, limits: Limits) -> Reservation:
        """Reserve a session's share of the host-wide sandbox memory budget."""
        return reserve_for(limits, self.memory_budget_mb, self.admission_timeout_s)

    def session(self, limits: Limits | None = None) -> BubblewrapSession:
        """Start a sandbox with a fresh workspace; it stays up until `close()`."""
        return BubblewrapSession(self, limits or self.limits)

    def command(
        self,
        workspace: str,
        limits: Limits,
        entry: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        """The bwrap command line of one sandbox (`bwrap_command.bwrap_command` with this
        backend's binary, interpreter and read-only binds)."""
        return bwrap_command(
            self.bwrap,
            self.python,
            workspace,
            limits,
            ro_binds=self.ro_binds,
            entry=entry,
            env=env,
            seccomp_fd=seccomp_fd,
        )


class BubblewrapSession(WorkspaceSession):
    """One bubblewrap sandbox with a warm supervisor and a persistent workspace."""

    def __init__(self, backend: BubblewrapSandbox, limits: Limits) -> None:
        if limits.network:
            raise SandboxError(NETWORK_REFUSED)
        super().__init__(backend, limits)
        self.backend: BubblewrapSandbox = backend
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending = bytearray()
        self._cgroup: SandboxCgroup | None = None
        self._spawned: list[subprocess.Popen[bytes]] = []
        self._spawned_cpu_s: dict[int, float] = {}  # pid -> its CPU budget (`renew_spawned`)
        self._next_id = 0
        self._open(backend.reserve(limits), self._make_workspace)

    def _make_workspace(self) -> str:
        backend = self.backend
        self._workspace = Workspace(
            self.limits.workspace_mb,
            self.limits.workspace_files,
            owner=backend.drop_to,
            root=backend.workspace_root,
        )
        return self._workspace.path

    # -- lifecycle ---------------------------------------------------------------------------

    def _start(self) -> None:
        backend = self.backend
        use_cgroups = backend.use_cgroups
        if use_cgroups is not False and self._cgroup is None:
            self._cgroup = SandboxCgroup.create()
            if self._cgroup is None and use_cgroups:
                raise SandboxError("cgroups requested (use_cgroups=True) but cgroup v1 is unusable")
        self._proc = self._popen(self.limits)
        self._pending = bytearray()
        self._next_id = 0
        line = self._read_line(time.monotonic() + START_TIMEOUT_S, 4096)
        if not isinstance(line, bytes) or not line.startswith(b'{"ready"'):
            detail = self._kill_and_collect_stderr()
            raise SandboxError(
                "bubblewrap sandbox did not start"
                + (f" within {START_TIMEOUT_S:.0f} s" if line is None else "")
                + f": {detail or 'no error output'}"
            )
        problem = hardening_problem(json.loads(line).get("hardening"))
        if problem is not None:
            self._kill_and_collect_stderr()
            raise SandboxError(f"bubblewrap sandbox is not hardened: {problem}")
        if self._cgroup is not None:
            try:
                self._cgroup.set_limits(
                    self.limits.memory_mb + output_memory_mb(self.limits), self.limits.max_procs
                )
                for pid in _process_tree(self._proc.pid):
                    self._cgroup.add(pid)
            except OSError:  # limits stay rlimits-only for this sandbox
                self._cgroup.remove(0)
                self._cgroup = None

    def _popen(
        self,
        limits: Limits,
        entry: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        popen_env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start one bwrap sandbox under the seccomp filter (handed over on a pipe)."""
        backend = self.backend
        user = backend.drop_to
        bpf = bwrap_filter(backend.python)
        filter_r, filter_w = os.pipe()
        try:
            os.write(filter_w, bpf)  # a few hundred bytes: far below the pipe's buffer
            os.close(filter_w)
            filter_w = -1
            return subprocess.Popen(
                backend.command(self.workspace, limits, entry=entry, env=env, seccomp_fd=filter_r),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/",
                pass_fds=(filter_r,),
                env=popen_env,
                user=user[0] if user else None,
                group=user[1] if user else None,
                extra_groups=[] if user else None,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start bubblewrap ({backend.bwrap!r}): {exc}") from exc
        finally:
            os.close(filter_r)
            if filter_w >= 0:
                os.close(filter_w)

    def _kill_and_collect_stderr(self) -> str:
        proc = self._proc
        if proc is None:
            return ""
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        err = _read_available(proc.stderr.fileno(), 8192) if proc.stderr else b""
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._proc = None
        return err.decode("utf-8", "replace").strip()

    def close(self) -> None:
        """Kill the sandbox and delete the workspace. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._kill_and_collect_stderr()
            for proc in self._spawned:
                _end_process(proc)
            self._spawned.clear()
            if self._cgroup is not None:  # rmdir waits for the dying processes: not on our time
                self._cgroup.remove_later()
                self._cgroup = None
            self._workspace.remove()
            self._reservation.release()

    @property
    def alive(self) -> bool:
        """True while the sandbox process is running."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The host pid of the sandbox process (bwrap), or None before the first run."""
        return self._proc.pid if self.alive and self._proc is not None else None

    def spawn(
        self,
        argv: list[str],
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a long-lived process beside the supervisor: a sibling bubblewrap sandbox with
        the same mounts, the same workspace, no network, the rlimits of `limits` and the
        session's memory/pids cgroup; it dies with the session (or with the host process). Its
        own PID namespace keeps it out of reach of `run`'s cleanup."""
        check_request(None, argv)
        limits = limits or self.limits
        if limits.network != self.limits.network:
            raise ValueError(
                f"limits.network={limits.network} differs from the session's "
                f"network={self.limits.network}"
            )
        backend = self.backend
        entry = [backend.python, "-I", "-c", SUPERVISOR_SOURCE, "exec"]
        entry.append(json.dumps(limits.to_dict()))
        with self._lock:
            self._check_open()
            self._spawned = [p for p in self._spawned if p.poll() is None]
            # bubblewrap's init (PID 1 there) keeps the environment it was started with,
            # readable in /proc/1/environ: give it nothing of the host's.
            proc = self._popen(
                limits, entry=[*entry, *argv], env=env, popen_env={"PATH": "/usr/bin:/bin"}
            )
            if self._cgroup is not None:
                with contextlib.suppress(OSError):
                    for pid in _process_tree(proc.pid):
                        self._cgroup.add(pid)
            self._spawned.append(proc)
            self._spawned_cpu_s[proc.pid] = limits.cpu_s
            return proc

    def renew_spawned(self) -> None:
        """Give the processes `spawn` started a clean slate for a new episode: their private
        `/tmp` emptied and their full CPU budget back (`forge_agent.sandbox.spawned`).

        Raises:
            OSError: one could not be renewed (restart it instead).
        """
        with self._lock:
            self._check_open()
            for proc in self._spawned:
                if proc.poll() is None:
                    cpu_s = self._spawned_cpu_s.get(proc.pid, self.limits.cpu_s)
                    renew_process_tree(_process_tree(proc.pid)[1:], cpu_s)

    # -- files -------------------------------------------------------------------------------

    @property
    def _file_owner(self) -> tuple[int, int] | None:
        return self.backend.drop_to

    # -- runs --------------------------------------------------------------------------------

    def _execute(
        self, code: str | None, argv: list[str] | None, limits: Limits, start: float
    ) -> RunResult:
        """Run Python `code` (in the sandbox's python) or the command `argv` in the workspace."""
        if not self.alive:
            if self._proc is not None:
                self._kill_and_collect_stderr()
                self.restarts += 1
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        oom_before = 0
        if self._cgroup is not None:
            self._cgroup.set_limits(limits.memory_mb + output_memory_mb(limits), limits.max_procs)
            oom_before = self._cgroup.oom_kills()
        self._next_id += 1
        request_id = self._next_id
        request = {
            "id": request_id,
            "code": code,
            "argv": argv,
            "cwd": WORKSPACE,
            "limits": limits.to_dict(),
        }
        try:
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError:
            pass  # the sandbox died; the read below reports it
        deadline = start + limits.wall_s + BACKSTOP_GRACE_S + 0.1 * limits.wall_s
        max_reply = reply_max_bytes(limits)
        line = self._read_line(deadline, max_reply)
        oom_kill = self._cgroup is not None and self._cgroup.oom_kills() > oom_before
        duration = time.monotonic() - start
        if isinstance(line, bytes):
            try:
                reply = json.loads(line)
            except ValueError:
                reply = {"error": f"unreadable supervisor reply {line[:200]!r}"}
            if not isinstance(reply, dict):
                reply = {"error": f"unreadable supervisor reply {line[:200]!r}"}
            if "error" in reply:
                self._kill_and_collect_stderr()  # the next run starts a fresh sandbox
                if reply.get("after_code") is True:
                    return supervisor_failed_after_code(str(reply["error"]), duration)
                raise SandboxError(f"bubblewrap supervisor failed: {reply['error']}")
            if reply.get("id") != request_id or self._pending:
                # Not the answer to this request: the supervisor's channel was tampered with.
                self._kill_and_collect_stderr()
                return _dead_sandbox(
                    "[sandbox] the supervisor's reply did not match the request (tampering?); "
                    "sandbox killed",
                    duration,
                )
            return result_from_reply(reply, duration, oom_kill)
        # No reply: the supervisor hung (backstop) or the sandbox died (OOM killer, ...).
        detail = self._kill_and_collect_stderr()
        if line is None:
            note = f"[sandbox] no answer within {deadline - start:.1f} s; sandbox killed"
        elif oom_kill:
            note = "[sandbox] the sandbox was killed by the OOM killer"
        elif line == REPLY_TOO_LONG:
            note = (
                f"[sandbox] the supervisor's reply exceeded {max_reply} bytes, more than "
                f"Limits.output_bytes={limits.output_bytes} allows (tampering?); sandbox killed"
            )
        else:
            note = "[sandbox] the sandbox died during the run" + (f": {detail}" if detail else "")
        return _dead_sandbox(note, duration, timed_out=line is None, oom=oom_kill)

    def _read_line(self, deadline: float, max_bytes: int) -> bytes | str | None:
        """The next protocol line; None on timeout, "" on EOF, `REPLY_TOO_LONG` past
        `max_bytes`. Never blocks past `deadline`; linear in the line's length (each byte is
        searched for the newline once)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        searched = 0
        while (end := self._pending.find(b"\n", searched)) < 0:
            searched = len(self._pending)
            if searched > max_bytes:
                return REPLY_TOO_LONG
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return ""
            self._pending += chunk
        line = bytes(self._pending[:end])
        del self._pending[: end + 1]
        return line


def _end_process(proc: subprocess.Popen[bytes]) -> None:
    """Kill a spawned sandbox (its init takes the whole PID namespace along) and reap it."""
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _dead_sandbox(
    note: str, duration: float, *, timed_out: bool = False, oom: bool = False
) -> RunResult:
    """The result of a run whose sandbox was killed (or died): `note` is its stderr."""
    return RunResult(
        stdout="",
        stderr=note + "\n",
        exit_code=None,
        signal=signal.SIGKILL,
        timed_out=timed_out,
        oom=oom,
        duration_s=duration,
        truncated=False,
    )


def _read_available(fd: int, max_bytes: int) -> bytes:
    data = b""
    while len(data) < max_bytes:
        ready, _, _ = select.select([fd], [], [], 0)
        if not ready:
            break
        chunk = os.read(fd, max_bytes - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc/PID/task/TID/children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for tid in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{tid}/children").read_text().split()
                todo.extend(int(c) for c in children)
        except OSError:
            continue
    return found

"""A forked sandbox: run a function of a warm Python process in a child cut off from the host.

For code that exists only as a Python callable of an interpreter the bubblewrap sandbox cannot
start: a verifiers environment's tool (`forge_agent.env.adapters.verifiers_tools`). Its
interpreter and packages live in the project's Python (here under ``/root``, a folder the
sandbox user may not enter; bwrap runs as that user and cannot bind it, not even through a
descriptor: bwrap 0.8 resolves ``--ro-bind-fd`` by path). So a warm process imports the code
once, and each call forks a child that, before the function runs:

- enters new PID, network and mount namespaces: no network (not even loopback), a `/proc` of
  its own (host processes are invisible), every process it starts dies with it;
- sees every mount of the host read-only, then gets fresh, bounded tmpfs on ``/tmp``,
  ``/var/tmp`` and ``/dev/shm`` (nothing crosses calls): what it may write is an allow-list
  (those tmpfs), not "whatever the host left world-writable" (``/run/lock`` was);
- reads an allow-list too: ``/usr``, ``/etc``, the libraries and ``/dev`` of the host
  (`SYSTEM_PATHS`), and the folders the interpreter reads (its prefix, the folder of each
  loaded top-level package), bound back read-only; every other top-level folder
  (``/root``, ``/home``, ``/work``, ``/var``, ``/run``, ``/sys``, ...) is an empty tmpfs;
- keeps no descriptor but its reply pipe (not its server's requests or replies);
- takes the rlimits of `Limits` (CPU seconds, address space beyond what the warm process
  holds, processes, file size, descriptors, no core files) and an empty environment;
- drops to a user of its own (uid `CALL_UID_BASE` + the host pid of its timing process, so
  its process count is its own; gid 65534, no groups, no capabilities, ``no_new_privs``),
  so the host's files are read-only to it and those only root may read stay unread, and runs
  under the seccomp filter of every sandbox (`forge_agent.sandbox.seccomp`: no ptrace, no new
  namespaces or mounts, no keyrings, BPF or io_uring);
- is killed, with its whole PID namespace, at `Limits.wall_s`.

What it shows beside bwrap: the interpreter's own folders (the project's checkout among
them, read-only), which bwrap cannot bind for the sandbox user. It needs
root (CAP_SYS_ADMIN for the namespaces and mounts); elsewhere `run_forked` raises
`SandboxError` (infra: the run stops, naming it), never runs the function unsandboxed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from forge_agent.sandbox.base import Limits, SandboxError
from forge_agent.sandbox.seccomp import bwrap_filter

__all__ = ["ForkedCall", "ForkedResult", "run_forked"]

SANDBOX_ID = 65534  # the sandbox user of every backend (nobody/nogroup)
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH, PR_SET_NO_NEW_PRIVS = 2, 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SETUP_FAILED = 125  # the child's exit status when its sandbox could not be set up
_libc = ctypes.CDLL(None, use_errno=True)

ForkedResult = dict[str, Any]
"""``{"ok": True, "value": ...}``, ``{"ok": False, "error": "..."}`` (the function raised, ran
out of time (then ``"timed_out": True`` too) or memory, or died); `value` is what the function
returned (JSON data)."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev")
"""What the child may read of the host besides the interpreter: the system's programs,
libraries and configuration (what bwrap binds). Every other top-level folder is covered."""


def _under(path: str, roots: tuple[str, ...] | list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _kept_paths() -> list[str]:
    """The folders outside `SYSTEM_PATHS` the interpreter reads (its prefix, and the folder of
    each loaded top-level package or module, e.g. `forge_agent/` of a checkout, not the
    checkout): bound back, read-only, into the covered tree."""
    found = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if "." not in name and isinstance(file, str) and os.path.isabs(file):
            found.add(os.path.dirname(os.path.realpath(file)))  # a package's own folder
    outside = [p for p in found if p != "/" and not _under(p, [*SYSTEM_PATHS, "/proc", "/tmp"])]
    return sorted(p for p in outside if not any(p != q and _under(p, [q]) for q in outside))


def _covered_folders() -> list[str]:
    """The top-level folders of the host the child does not see (an empty tmpfs over each)."""
    seen = (*SYSTEM_PATHS, "/proc", "/tmp")
    tops = [f"/{name}" for name in os.listdir("/")]
    return sorted(p for p in tops if p not in seen and os.path.isdir(p) and not os.path.islink(p))


def _mount_points() -> list[tuple[str, int]]:
    """The mount points of this mount namespace and the flags to keep on each (nosuid, ...)."""
    kept = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            path = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            flags = sum(kept.get(option, 0) for option in fields[5].split(","))
            points.append((path, flags))
    return points


def _read_only_host() -> None:
    """Every mount the child inherited becomes read-only; one that refuses is detached."""
    for path, flags in _mount_points():
        try:
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)
        except OSError:
            if _libc.umount2(path.encode(), MNT_DETACH) != 0 and os.path.ismount(path):
                raise


def _enter_sandbox(limits: Limits, keep_fd: int, seccomp_filter: bytes, uid: int) -> None:
    """In the forked child (PID 1 of its namespaces, still root): descriptors, mounts, rlimits,
    identity."""
    for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd != keep_fd:
            with contextlib.suppress(OSError):  # the listing's own descriptor is gone
                os.close(fd)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _read_only_host()
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    tmp_size = f"size={int(limits.file_size_mb)}m,mode=1777"
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_size)
    kept = _kept_paths()
    for i, path in enumerate(kept):  # stage the folders the interpreter reads, then cover
        os.mkdir(f"/tmp/.keep{i}")
        _mount(path, f"/tmp/.keep{i}", None, MS_BIND | MS_REC)
    covered = _covered_folders()
    for path in covered:  # /root, /home, /work, /var, /run, /sys, /opt...: an allow-list
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for i, path in enumerate(kept):
        os.makedirs(path, exist_ok=True)
        _mount(f"/tmp/.keep{i}", path, None, MS_BIND | MS_REC)
        _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    _check(_libc.umount2(b"/tmp", MNT_DETACH), "umount /tmp")
    if "/var" in covered:
        os.makedirs("/var/tmp", exist_ok=True)
    for path in covered:
        _mount(None, path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m")
    for path in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, tmp_size)
    mb = 1 << 20
    held = _virtual_size()
    cpu = int(limits.cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (held + int(limits.memory_mb) * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits.file_size_mb) * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (int(limits.max_procs),) * 2)  # this call's uid
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.chdir("/tmp")
    os.setgroups([])
    os.setgid(SANDBOX_ID)
    os.setuid(uid)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
    _load_seccomp(seccomp_filter)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp"})
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # what the function prints goes nowhere
        os.dup2(devnull, fd)
    os.close(devnull)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_seccomp(program: bytes) -> None:
    """Install the sandboxes' seccomp filter (`forge_agent.sandbox.seccomp`, compiled BPF)."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    _check(
        _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "prctl(seccomp)",
    )


def _virtual_size() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


CALL_UID_BASE = 1 << 20
"""A forked call runs as uid `CALL_UID_BASE` + the host pid of its timing process: a uid of
its own among every live call on the host (two live processes never share a pid), so its
RLIMIT_NPROC counts its own processes alone, where one uid for every call (65534) let one
call's processes fail another call's fork."""


def _child(fn: Callable[[], Any], limits: Limits, write_fd: int, seccomp_filter: bytes) -> None:
    """The forked process: new namespaces, then PID 1 of them runs `fn`; this one bounds it
    in time (killing PID 1 takes the whole namespace along). Never returns."""
    try:
        uid = CALL_UID_BASE + os.getpid()  # the host's pid, before the new namespace
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET), "unshare")
        inner = os.fork()
        if inner == 0:
            try:
                _enter_sandbox(limits, write_fd, seccomp_filter, uid)
            except BaseException as exc:
                _write(write_fd, {"ok": False, "setup_error": f"{type(exc).__name__}: {exc}"})
                os._exit(SETUP_FAILED)
            os.write(write_fd, STARTED)  # from here on the channel is the call's code's too
            try:
                reply: ForkedResult = {"ok": True, "value": fn()}
            except MemoryError:
                reply = {"ok": False, "error": "ran out of memory"}
            except BaseException as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            _write(write_fd, reply, limits.output_bytes)
            os._exit(0)
        os.close(write_fd)
        signal.signal(signal.SIGALRM, _timed_out)
        signal.setitimer(signal.ITIMER_REAL, float(limits.wall_s))
        try:
            os.waitpid(inner, 0)
        except TimeoutError:
            os.kill(inner, signal.SIGKILL)
            os.waitpid(inner, 0)
            os._exit(124)
        os._exit(0)
    except BaseException:
        os._exit(SETUP_FAILED)


def _timed_out(signum: int, frame: Any) -> None:
    raise TimeoutError


def _write(fd: int, reply: ForkedResult, limit: int = 65536) -> None:
    try:
        data = json.dumps(reply).encode()
    except (TypeError, ValueError):
        data = json.dumps({"ok": False, "error": "the result is not JSON data"}).encode()
    if len(data) > limit + 4096:
        data = json.dumps({"ok": False, "error": f"the result is over {limit} bytes"}).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class ForkedCall:
    """One call running in a forked sandbox, read without blocking: `start`, then `read` each
    time `fileno()` is readable until it returns True, then `result` (what `run_forked` does;
    a server with several calls in flight selects over their `fileno()`s)."""

    def __init__(self, fn: Callable[[], Any], limits: Limits) -> None:
        if os.geteuid() != 0:
            raise SandboxError(
                f"the forked sandbox needs root (CAP_SYS_ADMIN, for its namespaces and "
                f"mounts); this process runs as uid {os.geteuid()}. Run the env workers as "
                "root; nothing is run unsandboxed"
            )
        self.limits = limits
        self.deadline = time.monotonic() + float(limits.wall_s) + 5.0
        self._chunks: list[bytes] = []
        self._size = 0
        seccomp_filter = bwrap_filter()  # built once per process (a run of the system Python)
        read_fd, write_fd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(read_fd)
            _child(fn, limits, write_fd, seccomp_filter)
        os.close(write_fd)
        self._fd: int | None = read_fd

    def fileno(self) -> int:
        assert self._fd is not None, "the call's output is closed"
        return self._fd

    def read(self) -> bool:
        """Read what is there; True when the output is complete (or over its limit)."""
        chunk = os.read(self.fileno(), 1 << 16)
        self._chunks.append(chunk)
        self._size += len(chunk)
        return not chunk or self._size > self.limits.output_bytes + 8192

    def result(self) -> ForkedResult:
        """How the call went (the child reaped; killed first if past its deadline).

        Raises:
            SandboxError: the sandbox could not be set up here (not root, no namespaces).
        """
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        status = _reap(self.pid, self.deadline)
        code = os.waitstatus_to_exitcode(status)
        data = b"".join(self._chunks)
        if data.startswith(STARTED):  # the call's code ran: what follows is its to write
            return _call_reply(data[len(STARTED) :], code, self.limits)
        try:
            reply = json.loads(data) if data else None
        except (ValueError, RecursionError):
            reply = None
        if code == SETUP_FAILED or (isinstance(reply, dict) and "setup_error" in reply):
            detail = (reply or {}).get("setup_error", "the child could not enter its namespaces")
            raise SandboxError(f"the forked sandbox could not be set up: {detail} (it needs root)")
        if code == 124:
            error = f"timed out after {float(self.limits.wall_s):g} s"
            return {"ok": False, "error": error, "timed_out": True}
        if not isinstance(reply, dict):
            return {
                "ok": False,
                "error": "the call died without a result (killed, or out of memory)",
            }
        return reply


STARTED = b"\x00"
"""The byte the sandboxed process writes once its sandbox is set up, before the call's code
runs: a reply after it is the code's to write (it holds the descriptor), so nothing there is
trusted to say the sandbox failed (infra); a setup error is one only without it."""


def _call_reply(data: bytes, code: int, limits: Limits) -> ForkedResult:
    """The reply of a call whose code ran: exactly one of the shapes the sandbox writes
    (`{"ok": true, "value": ...}`, `{"ok": false, "error": "..."}`), else the call's failure
    (the code wrote on the channel: a forged setup error, an `infra` key, JSON nested past the
    stack, bytes that are no JSON). Never a `SandboxError`."""
    if code == 124:
        error = f"timed out after {float(limits.wall_s):g} s"
        return {"ok": False, "error": error, "timed_out": True}
    if not data:
        return {"ok": False, "error": "the call died without a result (killed, or out of memory)"}
    try:
        reply = json.loads(data)
    except (ValueError, RecursionError):
        reply = None
    if isinstance(reply, dict) and reply.get("ok") is True and set(reply) == {"ok", "value"}:
        return reply
    if (
        isinstance(reply, dict)
        and reply.get("ok") is False
        and set(reply) == {"ok", "error"}
        and isinstance(reply["error"], str)
    ):
        return reply
    return {"ok": False, "error": "the call's reply is not one the sandbox writes: its code "
            "wrote on the reply channel"}  # fmt: skip


def run_forked(fn: Callable[[], Any], limits: Limits) -> ForkedResult:
    """Run `fn()` in a forked sandbox (see the module docstring) and return how it went.

    Call from a single-threaded process (a fork copies only the calling thread).

    Raises:
        SandboxError: the sandbox could not be set up here (not root, no namespaces).
    """
    call = ForkedCall(fn, limits)
    while time.monotonic() < call.deadline:
        ready, _, _ = select.select([call], [], [], 0.1)
        if ready and call.read():
            break
    return call.result()


def _reap(pid: int, deadline: float) -> int:
    """The wait status of `pid` (the timing child), killed if still there at `deadline`."""
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.001)
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]

"""Running one request inside a sandbox: the half of the supervisor that forks the run.

For each request (`handle`) the supervisor forks a child that applies the rlimits
(`apply_limits`), changes to the workspace and either runs Python source in-process (the
interpreter is already warm, so this costs a fork, not an interpreter start) or execs a command.
The supervisor reads the child's stdout/stderr incrementally (keeping at most ``output_bytes``
of each), enforces the wall time, and afterwards kills every process the run left behind
(``setsid`` daemons included), so nothing runs between requests.

Stdlib only, any Python >= 3.8, no import of forge_agent: the sandbox gets this file and
`forge_agent.sandbox.supervisor` as one source text (`supervisor_host.SUPERVISOR_SOURCE`).
"""

import os
import resource
import select
import signal
import sys
import time

READ_CHUNK = 65536
DRAIN_AFTER_EXIT_S = 0.05  # how long pipes held open by orphans may delay the answer
MEMORY_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"Out of memory")


def _limit(kind, soft, hard=None):
    hard = soft if hard is None else hard
    try:
        resource.setrlimit(kind, (soft, hard))
    except (ValueError, OSError):
        _, current_hard = resource.getrlimit(kind)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(kind, (soft, hard))


def apply_limits(limits):
    """The rlimits of a `Limits` dict, applied to this process (inherited by what it execs)."""
    mb = 1024 * 1024
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    _limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    _limit(resource.RLIMIT_AS, int(limits["memory_mb"]) * mb)
    _limit(resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * mb)
    _limit(resource.RLIMIT_NPROC, int(limits["max_procs"]))
    _limit(resource.RLIMIT_NOFILE, 1024)
    _limit(resource.RLIMIT_CORE, 0)


def _child(request, out_w, err_w):
    """Runs in the forked child: never returns."""
    code = 1
    try:
        limits = request["limits"]
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        try:  # prefer the run over the supervisor when memory runs out
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        os.chdir(request.get("cwd") or "/")
        apply_limits(limits)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        argv = request.get("argv")
        if argv:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            try:
                os.execvp(argv[0], argv)
            except OSError as exc:
                os.write(2, f"cannot run {argv[0]!r}: {exc.strerror}\n".encode())
                os._exit(127)
        code = _run_python(request["code"])
    except BaseException as exc:
        try:  # noqa: SIM105 - no contextlib import in the sandbox
            os.write(2, f"[sandbox] child setup failed: {exc!r}\n".encode())
        except OSError:
            pass
    os._exit(code)


def _run_python(source):
    """Run `source` like ``python3 -c source`` and return the exit status."""
    # Import nothing new here: every import would be paid again by every forked run.
    import atexit
    import io

    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=False,
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.argv = ["-c"]
    main = type(sys)("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    status = 0
    try:
        exec(compile(source, "<string>", "exec"), main.__dict__)
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException:
        _print_exception()
        status = 1
    try:  # what interpreter shutdown would do: join threads, run atexit hooks, flush
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        _print_exception()
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - no contextlib import in the sandbox
            stream.flush()
        except BaseException:
            pass
    return status


def _print_exception():
    """Print the current exception like the interpreter, without the supervisor's own frame."""
    import traceback

    kind, value, tb = sys.exc_info()
    if tb is not None and tb.tb_frame.f_code.co_name == "_run_python":
        tb = tb.tb_next
    traceback.print_exception(kind, value, tb)


def _exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:  # noqa: SIM105 - no contextlib import in the sandbox
        sys.stderr.write(str(code) + "\n")
    except BaseException:
        pass
    return 1


def _kill_leftovers(protect):
    """SIGKILL every process this user can signal, except `protect`; reap our children."""
    me = os.getpid()
    if me == 1:  # PID-namespace init: kill(-1) reaches everything but us, atomically
        try:  # noqa: SIM105 - no contextlib import in the sandbox
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    else:
        spare = set(protect) | {1, me}
        for _ in range(50):
            found = False
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) not in spare:
                    try:
                        os.kill(int(name), signal.SIGKILL)
                        found = True
                    except OSError:
                        pass
            if not found:
                break
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue


def _oom_kills():
    """The OOM-kill counter of our memory cgroup, if visible (Docker), else None."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def prctl(option, value=0):
    """prctl(2) through ctypes; returns its result, or -1 where ctypes cannot load."""
    try:
        import ctypes

        return int(ctypes.CDLL(None).prctl(option, value, 0, 0, 0))
    except Exception:
        return -1


_code_started = [False]  # set once a request's child was forked (see `failure_reply`)


def failure_reply(exc):
    """The reply when running a request raised: ``after_code`` says the code had started, so
    the failure may be its doing (it shares our uid) and counts as the code's failure."""
    return {"error": f"supervisor failed: {exc!r}", "after_code": _code_started[0]}


class _Captured:
    """What a run writes on stdout and stderr: at most ``keep`` bytes of each, and whether
    more came (``truncated``); ``open_fds``: the pipes not yet at end of file."""

    def __init__(self, out_r, err_r, keep):
        self.out_r, self.err_r, self.keep = out_r, err_r, keep
        self.buffers = {out_r: bytearray(), err_r: bytearray()}
        self.open_fds = [out_r, err_r]
        self.truncated = False

    def take(self, fd, chunk):
        """Keep what fits of ``chunk`` (read from ``fd``); an empty chunk closes ``fd``."""
        if not chunk:
            self.open_fds.remove(fd)
            return
        buf = self.buffers[fd]
        room = self.keep - len(buf)
        if room > 0:
            buf += chunk[:room]
        if len(chunk) > max(room, 0):
            self.truncated = True

    def drain_and_close(self):
        """Once the run's leftovers are dead: take what they wrote, then close the pipes."""
        for fd in (self.out_r, self.err_r):
            while fd in self.open_fds:
                try:
                    ready, _, _ = select.select([fd], [], [], 0)
                    chunk = os.read(fd, READ_CHUNK) if ready else b""
                except OSError:
                    chunk = b""
                self.take(fd, chunk)
            os.close(fd)


def _pidfd(pid):
    """A pidfd of ``pid`` (readable when it exits), or None where the kernel has none."""
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _wait_capturing(pid, pidfd, captured, deadline):
    """Read the run's output until it exits and its pipes close (or ``DRAIN_AFTER_EXIT_S``
    after its exit, pipes held by orphans), or until ``deadline``; (its wait status or None,
    whether the wall time ran out)."""
    status = None
    drain_until = None
    while True:
        if status is None:
            try:
                waited, st = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                waited, st = pid, 0
            if waited == pid:
                status = st
                drain_until = min(deadline, time.monotonic() + DRAIN_AFTER_EXIT_S)
        now = time.monotonic()
        if status is not None and (not captured.open_fds or now >= drain_until):
            return status, False
        if status is None and now >= deadline:
            return None, True
        until = drain_until if status is not None else deadline
        watch = captured.open_fds + ([pidfd] if pidfd is not None and status is None else [])
        timeout = max(0.0, until - now)
        if pidfd is None and status is None:
            timeout = min(timeout, 0.01)
        try:
            ready, _, _ = select.select(watch, [], [], timeout)
        except InterruptedError:
            continue
        for fd in ready:
            if fd != pidfd:
                captured.take(fd, os.read(fd, READ_CHUNK))


def handle(request):
    """Run one request and return the result dict."""
    _code_started[0] = False
    limits = request["limits"]
    oom_before = _oom_kills() if request.get("check_cgroup_oom") else None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    _code_started[0] = True
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        prctl(4, 1)  # the run is an ordinary (dumpable) process; the supervisor is not
        _child(request, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    pidfd = _pidfd(pid)
    captured = _Captured(out_r, err_r, int(limits["output_bytes"]))
    deadline = start + float(limits["wall_s"])
    status, timed_out = _wait_capturing(pid, pidfd, captured, deadline)
    _kill_leftovers(request.get("protect_pids") or ())
    if status is None:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = 9  # reaped by _kill_leftovers; it was killed there
    captured.drain_and_close()
    if pidfd is not None:
        os.close(pidfd)
    duration = time.monotonic() - start
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if timed_out:
        exit_code, sig = None, signal.SIGKILL
    err = captured.buffers[err_r]
    memory_hint = (exit_code not in (None, 0)) and any(m in err[-4096:] for m in MEMORY_MARKERS)
    if oom_before is not None and (_oom_kills() or 0) > oom_before:
        memory_hint = True
    return {
        "stdout": captured.buffers[out_r],
        "stderr": err,
        "exit_code": exit_code,
        "signal": sig,
        "timed_out": timed_out or sig == signal.SIGXCPU,
        "memory_error": memory_hint,
        "duration_s": duration,
        "truncated": captured.truncated,
    }

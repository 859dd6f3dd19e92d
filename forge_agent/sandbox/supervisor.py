"""The supervisor that runs *inside* a sandbox (stdlib only; any Python >= 3.8).

The host passes this file's source to the sandbox's interpreter (``python3 -c SOURCE MODE``).
For each request it forks a child that applies the rlimits, changes to the workspace and either
runs Python source in-process (the interpreter is already warm, so this costs a fork, not an
interpreter start) or execs a command. The supervisor reads the child's stdout/stderr
incrementally (keeping at most ``output_bytes`` of each), enforces the wall time, and afterwards
kills every process the run left behind (``setsid`` daemons included), so nothing runs between
requests.

Modes:
Replies are one JSON line; the run's stdout and stderr go in it as base64 of their raw bytes
(``stdout_b64``, ``stderr_b64``), so a reply is at most 4/3 of twice ``output_bytes`` plus a
few hundred bytes whatever the output holds (JSON's own escapes take up to 6 bytes per byte),
and it is written in pieces, never joined into one string (`reply_pieces`).

- ``serve``: one JSON request per line on fd 0, one JSON result per line on fd 1. Under
  bubblewrap it runs as PID 1 of the sandbox's PID namespace (``--as-pid-1``), so the code it
  runs cannot kill it (the kernel drops SIGKILL sent to a namespace's init from inside), and
  ``kill(-1, SIGKILL)`` cleans up everything else.
- ``oneshot PATH [REPLY]``: run the request in file PATH and write one JSON result to the file
  REPLY (opened and unlinked before the code starts, so the code cannot reach it; the host
  reads it through the descriptor it kept), or to stdout without REPLY (Docker ``exec``/``run``).
  Leftovers are found by scanning /proc, sparing the PIDs listed in ``protect_pids``.
- ``keepalive``: a Docker session's PID 1: hardens itself, prints its `hardening()` as one
  JSON line, then only reaps orphans.
- ``exec LIMITS_JSON ARGV...``: apply the rlimits, then exec ARGV in place (a long-lived process
  with the host's pipes as stdin/stdout, started by `SandboxSession.spawn`).

Hardening: the supervisor makes itself undumpable (``PR_SET_DUMPABLE`` 0) before any code runs,
so code of the same uid can neither ptrace it nor open its ``/proc/PID/mem`` or ``fd``; the
backends add a seccomp filter (`forge_agent.sandbox.seccomp`). `hardening()` reports both (and
``no_new_privs``) in the ready line / every reply, and the host refuses a sandbox where a step
did not take effect.
"""

import binascii
import json
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


def _apply_limits(limits):
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
        _apply_limits(limits)
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


def _prctl(option, value=0):
    """prctl(2) through ctypes; returns its result, or -1 where ctypes cannot load."""
    try:
        import ctypes

        return int(ctypes.CDLL(None).prctl(option, value, 0, 0, 0))
    except Exception:
        return -1


def _set_dumpable(flag):
    """PR_SET_DUMPABLE: a non-dumpable supervisor cannot be ptraced, nor its /proc/PID/mem or
    /proc/PID/fd opened, by code of the same uid. Returns True when it took effect."""
    _prctl(4, int(flag))
    return _prctl(3) == int(flag)


def _filter_denies_process_vm():
    """Probe the seccomp filter: a zero-length process_vm_readv of ourselves succeeds unless a
    filter denies it. True when denied, False when allowed, None when it cannot be probed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.process_vm_readv(os.getpid(), None, 0, None, 0, 0)
        return rc == -1 and ctypes.get_errno() == 1  # EPERM
    except Exception:
        return None


def hardening():
    """What protects this process: ``seccomp`` (mode from /proc/self/status: 2 = filter),
    ``filter_denies`` (a probe: the filter refuses process_vm_readv), ``no_new_privs`` (0/1)
    and ``dumpable`` (PR_GET_DUMPABLE; -1 when unknown)."""
    found = {
        "seccomp": -1,
        "no_new_privs": -1,
        "dumpable": _prctl(3),
        "filter_denies": _filter_denies_process_vm(),
    }
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "Seccomp":
                    found["seccomp"] = int(value)
                elif key == "NoNewPrivs":
                    found["no_new_privs"] = int(value)
    except (OSError, ValueError):
        pass
    return found


def _use_workspace_path():
    """Imports of the code resolve from the working directory first, as under ``python3 -c``.

    The supervisor itself starts isolated (``python3 -I``: no working directory or script
    folder on sys.path), so a file the code planted in the workspace can never shadow a module
    the supervisor imports; modules it needs later are imported here, before the change.
    """
    import traceback  # noqa: F401 - used by _print_exception after the change

    sys.dont_write_bytecode = True
    sys.path[:] = [p for p in sys.path if p != ""]
    sys.path.insert(0, "")


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
        _prctl(4, 1)  # the run is an ordinary (dumpable) process; the supervisor is not
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


def reply_pieces(reply):
    """The JSON line of `reply` in pieces: each bytes value ``KEY`` becomes ``KEY_b64`` (its
    base64), written from the buffer as it is; nothing is copied into one big string."""
    plain = {k: v for k, v in reply.items() if not isinstance(v, (bytes, bytearray))}
    pieces = [json.dumps(plain)[:-1].encode()]
    sep = b", " if plain else b""
    for key, value in reply.items():
        if isinstance(value, (bytes, bytearray)):
            pieces += [sep + json.dumps(key + "_b64").encode() + b': "']
            pieces += [binascii.b2a_base64(value, newline=False), b'"']
            sep = b", "
    pieces.append(b"}\n")
    return pieces


def _write_all(fd, pieces):
    for piece in pieces:
        view = memoryview(piece)
        while view:
            view = view[os.write(fd, view) :]


def serve():
    undumpable = _set_dumpable(False)
    _use_workspace_path()
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    ready = {"ready": True, "pid": os.getpid(), "hardening": hardening()}
    ready["hardening"]["undumpable"] = undumpable
    os.write(proto_out, json.dumps(ready).encode() + b"\n")
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = proto_in.read(1 << 20)
            if not chunk:
                return
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        request_id = None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            reply = handle(request)
        except Exception as exc:
            reply = failure_reply(exc)
        reply["id"] = request_id
        _write_all(proto_out, reply_pieces(reply))
        reply = None  # the output buffers: free before the next request


def oneshot(path, reply_path=None):
    undumpable = _set_dumpable(False)
    _use_workspace_path()
    reply_fd = None
    if reply_path is not None:  # nothing the code does can reach this file after the unlink
        reply_fd = os.open(reply_path, os.O_WRONLY | os.O_NOFOLLOW)
        os.unlink(reply_path)
    with open(path, "rb") as f:
        request = json.load(f)
    found = hardening()  # before the code runs: what it does later cannot blur the report
    found["undumpable"] = undumpable
    try:
        reply = handle(request)
    except Exception as exc:
        reply = failure_reply(exc)
    reply["id"] = request.get("id")
    reply["hardening"] = found
    if reply_fd is None:
        sys.stdout.flush()
        _write_all(1, reply_pieces(reply))
        return
    _write_all(reply_fd, reply_pieces(reply))
    os.close(reply_fd)


def keepalive():
    found = hardening()
    found["undumpable"] = _set_dumpable(False)
    found["dumpable"] = _prctl(3)
    sys.stdout.write(json.dumps({"ready": True, "pid": os.getpid(), "hardening": found}) + "\n")
    sys.stdout.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
    while True:  # as PID 1, reap the orphans every run leaves (they are killed after it)
        signal.sigwait([signal.SIGCHLD])
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def exec_limited(limits_json, argv):
    """Apply the rlimits of `limits_json`, then become `argv` (a long-lived process whose
    stdin/stdout the host keeps, e.g. a tool server). Nothing is killed after it: it lives
    until the host ends it."""
    _apply_limits(json.loads(limits_json))
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"cannot run {argv[0]!r}: {exc.strerror}\n")
        sys.exit(127)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["oneshot"] and len(sys.argv) in (3, 4):
        oneshot(*sys.argv[2:])
    elif sys.argv[1:2] == ["keepalive"]:
        keepalive()
    elif sys.argv[1:2] == ["exec"] and len(sys.argv) >= 4:
        exec_limited(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(
            "usage: supervisor.py serve | oneshot REQUEST.json [REPLY] | keepalive"
            " | exec LIMITS_JSON ARGV..."
        )

"""The supervisor that runs *inside* a sandbox (stdlib only; any Python >= 3.8).

The host passes its source to the sandbox's interpreter (``python3 -c SOURCE MODE``, or as a
file under Docker): this file after `forge_agent.sandbox.supervised_run`, which runs each request
in a forked child (`handle`), as one text without the import line below
(`supervisor_host.SUPERVISOR_SOURCE`). This half holds the modes, the replies and the hardening.

Replies are one JSON line; the run's stdout and stderr go in it as base64 of their raw bytes
(``stdout_b64``, ``stderr_b64``), so a reply is at most 4/3 of twice ``output_bytes`` plus a
few hundred bytes whatever the output holds (JSON's own escapes take up to 6 bytes per byte),
and it is written in pieces, never joined into one string (`reply_pieces`).

Modes:
- ``serve``: one JSON request per line on fd 0, one JSON result per line on fd 1. Under
  bubblewrap it runs as PID 1 of the sandbox's PID namespace (``--as-pid-1``), so the code it
  runs cannot kill it (the kernel drops SIGKILL sent to a namespace's init from inside), and
  ``kill(-1, SIGKILL)`` cleans up everything else.
- ``oneshot PATH [REPLY]``: run the request in file PATH and write one JSON result to the file
  REPLY (opened and unlinked before the code starts, so the code cannot reach it; the host
  reads it through the descriptor it kept), or to stdout without REPLY (Docker ``exec``/``run``).
  Leftovers are found by scanning /proc, sparing the PIDs listed in ``protect_pids``.
- ``serve`` and ``oneshot`` refuse to start outside a sandbox (`refusal`): after each run they
  SIGKILL every process they can signal, on a host every process of their user (as root: all).
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
import signal
import sys

from forge_agent.sandbox.supervised_run import apply_limits, failure_reply, handle, prctl  # host


def _set_dumpable(flag):
    """PR_SET_DUMPABLE: a non-dumpable supervisor cannot be ptraced, nor its /proc/PID/mem or
    /proc/PID/fd opened, by code of the same uid. Returns True when it took effect."""
    prctl(4, int(flag))
    return prctl(3) == int(flag)


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
        "dumpable": prctl(3),
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


def refusal(pid, init_argv):
    """Why this process must not run requests, or None when it may.

    A run ends by SIGKILLing every process the supervisor can signal (`_kill_leftovers`). That
    stays inside the sandbox only when the supervisor is PID 1 of a PID namespace of its own
    (bwrap ``--as-pid-1``, ``docker run``), or runs where PID 1 is a supervisor's keep-alive
    (``docker exec`` into a session's container). `pid` is this process's pid, `init_argv` the
    command line of PID 1 as this process sees it.
    """
    if pid == 1:
        return None
    if init_argv[-1:] == ["keepalive"] and any(a.endswith("supervisor.py") for a in init_argv):
        return None
    return (
        f"refusing to run requests outside a sandbox: this process (pid {pid}) is not PID 1 of "
        f"a PID namespace of its own, and PID 1 ({' '.join(init_argv)[:200]!r}) is not a "
        "supervisor's keep-alive; after each run the supervisor SIGKILLs every process it can "
        "signal, which here would reach processes outside any sandbox"
    )


def _init_argv():
    """The command line of PID 1 as this process sees it ([] when unreadable)."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            argv = f.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return []
    return argv[:-1] if argv[-1:] == [""] else argv


def _refuse_outside_a_sandbox(mode):
    """Exit (status 1, the reason on stderr) unless `refusal` allows running requests here."""
    pid = os.getpid()
    problem = refusal(pid, [] if pid == 1 else _init_argv())
    if problem is not None:
        sys.exit(f"supervisor {mode}: {problem}")


def serve():
    _refuse_outside_a_sandbox("serve")
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
    _refuse_outside_a_sandbox("oneshot")
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
    found["dumpable"] = prctl(3)
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
    apply_limits(json.loads(limits_json))
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

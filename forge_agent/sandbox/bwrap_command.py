"""The bubblewrap command line of one sandbox: what it sees, who it runs as, what it runs.

``bwrap --unshare-all --die-with-parent --new-session`` (plus ``--as-pid-1`` when the
supervisor is the sandbox's PID 1) with a read-only ``/usr`` (plus the ``/bin``, ``/lib*``
links and the harmless ``/etc`` files of `ETC_FILES`), a private ``/proc`` and ``/dev``, a
size-bounded tmpfs ``/tmp``, a read-only root and one writable directory: the workspace, bound
at ``/workspace``. The environment is cleared; the code runs as uid/gid `SANDBOX_ID`. Its
network namespace is always a new, empty one (`NETWORK_REFUSED` says why there is no other).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from forge_agent.sandbox.base import WORKSPACE, Limits, SandboxError
from forge_agent.sandbox.supervisor_host import SUPERVISOR_SOURCE

__all__ = ["ETC_FILES", "NETWORK_REFUSED", "SANDBOX_ID", "bwrap_command"]

SANDBOX_ID = 65534
"""uid and gid inside the sandbox (and on the host when the host process is root)."""

ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
)
"""The only /etc entries the sandbox sees (no shadow, no ssh keys, no resolver config)."""

NETWORK_REFUSED = (
    "Limits(network=True) is refused on the bwrap backend: bubblewrap's only network option "
    "(--share-net) runs the code in the host's network namespace, where it reaches every "
    "listener on the host's 127.0.0.1 and the host's abstract unix sockets (this run's own "
    "among them); use the docker backend (a network namespace of its own with outbound "
    "access) for code that needs the network"
)
"""Why bwrap sandboxes have no network option (until one with a namespace of its own)."""


def bwrap_command(
    bwrap: str,
    python: str,
    workspace: str,
    limits: Limits,
    *,
    ro_binds: Sequence[str] = (),
    entry: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The command line of one sandbox (`bwrap` the binary, `python` its interpreter, the host
    folder `workspace` bound at ``/workspace``, `ro_binds` bound read-only at the same place)
    whose PID 1 is the supervisor, or (with `entry`) one that runs `entry` under bubblewrap's
    own init, with `env` added; `seccomp_fd` is a readable descriptor holding the compiled
    filter (`seccomp.bwrap_filter`).

    Raises:
        SandboxError: for ``limits.network`` (`NETWORK_REFUSED`).
    """
    if limits.network:
        raise SandboxError(NETWORK_REFUSED)
    args = [bwrap, "--unshare-all"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--die-with-parent", "--new-session"]
    if entry is None:
        args.append("--as-pid-1")
    args += [
        "--uid", str(SANDBOX_ID),
        "--gid", str(SANDBOX_ID),
        "--hostname", "sandbox",
        "--clearenv",
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
        "--setenv", "HOME", WORKSPACE,
        "--setenv", "TMPDIR", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for key, value in (env or {}).items():
        args += ["--setenv", key, value]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in (*ETC_FILES, *ro_binds):
        args += ["--ro-bind-try", path, path]
    args += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(int(limits.file_size_mb) * 1024 * 1024),
        "--tmpfs", "/tmp",
        "--bind", workspace, WORKSPACE,
        "--chdir", WORKSPACE,
        "--remount-ro", "/",
    ]  # fmt: skip
    return args + list(entry or [python, "-I", "-c", SUPERVISOR_SOURCE, "serve"])

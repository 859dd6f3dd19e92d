"""The host side of a Docker sandbox's channel to its supervisor: the control folder
(supervisor source, requests; read-only in the container at `CONTROL_DIR`), the reply folder
(`REPLY_DIR`) with one reply file per run, and the host's own enforcement of the wall time
while it waits for the reply (`wait_within_wall`).

Replies never come from container logs: the host creates a reply file with a random name and
keeps a descriptor to it; the supervisor opens it and unlinks it before the code starts (so the
code cannot reach it, and the host sees the code's start as the unlink), and the host reads the
reply through its descriptor, bounded by `reply_max_bytes`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from forge_agent.sandbox.base import (
    WORKSPACE,
    Limits,
    RunResult,
    SandboxError,
    reply_max_bytes,
    result_from_reply,
    supervisor_failed_after_code,
)
from forge_agent.sandbox.supervisor_host import SUPERVISOR_SOURCE, hardening_problem
from forge_agent.sandbox.tree_removal import empty_folder
from forge_agent.sandbox.workspace import Workspace

__all__ = ["ControlDirs", "Reply", "no_answer", "result_of_reply", "wait_within_wall"]

CONTROL_DIR = "/.forge"
REPLY_DIR = "/.forge-out"
CONTROL_MB = 48
"""Quota of the control and reply folders beyond the largest reply (requests hold the code;
replies hold output, up to `reply_max_bytes`)."""
BACKSTOP_GRACE_S = 5.0
"""How long past ``wall_s`` the host waits for a supervisor whose code never started."""
WALL_GRACE_S = 1.0
"""How long past ``wall_s`` from the code's start the host waits for the supervisor's answer
(its own kill, the reply, the exec's end) before it kills the container itself."""
START_POLL_S = 0.02


class ControlDirs:
    """The host side of one sandbox, on one `Workspace` (quota, teardown): the workspace, the
    read-only control folder (supervisor, requests) and the reply folder."""

    _ids = itertools.count()

    def __init__(self, root: str | None, owner: tuple[int, int] | None, limits: Limits) -> None:
        self._workspace = Workspace(
            limits.workspace_mb, limits.workspace_files, owner=owner, root=root
        )
        self.workspace = self._workspace.path
        if owner is None:
            os.chmod(self.workspace, 0o777)
        try:  # a second small quota: the code filling its workspace cannot stop the reply
            control_mb = CONTROL_MB + -(-reply_max_bytes(limits) // (1 << 20))
            self._control = Workspace(control_mb, 256, root=root, prefix="forge-ctl-")
        except BaseException:
            self._workspace.remove()
            raise
        self.owner = owner
        self.base = self._control.path
        os.chmod(self.base, 0o755)
        self.control = os.path.join(self.base, "control")
        self.replies = os.path.join(self.base, "replies")
        os.mkdir(self.control, 0o755)
        os.mkdir(self.replies, 0o700)
        if owner is not None:
            os.chown(self.replies, *owner)
        else:
            os.chmod(self.replies, 0o777)
        with open(os.path.join(self.control, "supervisor.py"), "w") as f:
            f.write(SUPERVISOR_SOURCE)

    def write_request(
        self, code: str | None, argv: list[str] | None, limits: Limits, protect_pids: list[Any]
    ) -> str:
        name = f"request-{next(self._ids)}.json"
        request = {
            "code": code,
            "argv": argv,
            "cwd": WORKSPACE,
            "limits": limits.to_dict(),
            "protect_pids": protect_pids,
            "check_cgroup_oom": True,
        }
        with open(os.path.join(self.control, name), "w") as f:
            json.dump(request, f)
        return f"{CONTROL_DIR}/{name}"

    def new_reply(self) -> Reply:
        """A fresh reply file (random name) with a host descriptor kept on it; whatever else
        the reply folder holds (files the code planted there) is cleared first."""
        empty_folder(self.replies)  # through descriptors: a planted symlink is never followed
        return Reply(self.replies, self.owner)

    def remove(self) -> None:
        self._workspace.remove()
        self._control.remove()


class Reply:
    """One reply file: created here, opened and unlinked by the supervisor, read here."""

    def __init__(self, folder: str, owner: tuple[int, int] | None) -> None:
        name = f"reply-{secrets.token_hex(16)}"
        path = os.path.join(folder, name)
        self.fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        if owner is not None:
            os.fchown(self.fd, *owner)
        else:
            os.fchmod(self.fd, 0o666)
        self.host_path = path
        self.container_path = f"{REPLY_DIR}/{name}"

    def taken(self) -> bool:
        """True once the supervisor unlinked the file (it does so just before the code starts)."""
        return self.fd >= 0 and os.fstat(self.fd).st_nlink == 0

    def read(self, max_bytes: int) -> bytes | None:
        """The reply (empty if the supervisor never wrote one), None when it is longer than
        `max_bytes` (more than the run's output limit allows); closes the descriptor."""
        try:
            size = os.fstat(self.fd).st_size
            if size > max_bytes:
                return None
            data = bytearray()
            while chunk := os.pread(self.fd, 1 << 20, len(data)):
                data += chunk
                if len(data) > max_bytes:
                    return None
            return bytes(data)
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(OSError):  # the supervisor never took it
            os.unlink(self.host_path)


def wait_within_wall(
    wait_for_exit: Callable[[], None], reply: Reply, limits: Limits, start: float
) -> str | None:
    """Run `wait_for_exit` (returns when the supervisor exits) in a thread, enforcing the wall
    time from the host: None when the supervisor exited in time, else why the caller must kill
    the container (no exit within ``wall_s`` + `WALL_GRACE_S` of the code's start, seen as
    `reply.taken`, or ``wall_s`` + `BACKSTOP_GRACE_S` of `start` when it never started)."""
    waiter = threading.Thread(target=wait_for_exit, daemon=True)
    waiter.start()
    started = None
    while True:
        now = time.monotonic()
        if started is None and reply.taken():
            started = now
        if started is None:
            deadline = start + limits.wall_s + BACKSTOP_GRACE_S
            waiter.join(min(START_POLL_S, max(0.0, deadline - now)))
        else:
            deadline = started + limits.wall_s + WALL_GRACE_S
            waiter.join(max(0.0, deadline - now))
        if not waiter.is_alive():
            return None
        if time.monotonic() >= deadline:
            if started is None:
                return f"no answer within {deadline - start:.1f} s; container killed"
            return (
                f"the code ran past wall_s={limits.wall_s:g} s and the supervisor did not stop "
                f"it (stopped by the code?); container killed {deadline - started:.1f} s "
                "after the code started"
            )


def result_of_reply(raw: bytes | None, start: float, who: str) -> RunResult:
    duration = time.monotonic() - start
    if raw is None:
        note = f"the {who}'s reply was longer than the output limit allows (tampering?)"
        return no_answer(start, note, False)
    reply = None
    for line in reversed(raw.splitlines()):
        try:
            reply = json.loads(line)
            break
        except ValueError:
            continue
    if not isinstance(reply, dict) or "stdout_b64" not in reply:
        if isinstance(reply, dict) and "error" in reply:
            if reply.get("after_code") is True:
                return supervisor_failed_after_code(str(reply["error"]), duration)
            raise SandboxError(f"docker sandbox supervisor failed: {reply['error']}")
        return no_answer(start, f"the {who} died during the run (killed by the code?)", False)
    problem = hardening_problem(reply.get("hardening"))
    if problem is not None:
        raise SandboxError(f"Docker sandbox is not hardened: {problem}")
    return result_from_reply(reply, duration, False)


def no_answer(start: float, note: str, timed_out: bool = True) -> RunResult:
    return RunResult(
        stdout="",
        stderr=f"[sandbox] {note}\n",
        exit_code=None,
        signal=signal.SIGKILL,
        timed_out=timed_out,
        oom=False,
        duration_s=time.monotonic() - start,
        truncated=False,
    )

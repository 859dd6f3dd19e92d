"""A janitor per process that makes sandboxes: what a killed process leaves, it removes.

A process killed with SIGKILL (an env worker past its step timeout, a worker whose controller
died) cannot close its sandboxes: their workspaces (a tmpfs mount and a folder), cgroups and
Docker containers would stay behind. That is how ordinary test and training runs left
hundreds of empty ``/tmp/forge-ws-*`` folders: the workers were killed, and nothing else ever
removed what they made.

The first sandbox of a process starts one small janitor process in its own session (so a
``killpg`` of the owner's group spares it) whose stdin is a pipe only the owner holds. The
owner registers what it makes (`watch`); when the pipe reaches EOF (the owner exited, however
it died), the janitor removes whatever is still registered: unmounts and deletes workspaces,
removes cgroups, removes Docker containers. Closing a sandbox normally unregisters it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from forge_agent.sandbox.mounts import mounted_paths, teardown

__all__ = ["forget", "watch"]

_lock = threading.Lock()
_state: dict[str, object] = {"pid": None, "proc": None}


def _janitor() -> subprocess.Popen[bytes] | None:
    if _state["pid"] != os.getpid():  # first use, or a forked child: start our own
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "forge_agent.sandbox.janitor", str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                cwd="/",
            )
        except OSError:
            return None
        _state.update(pid=os.getpid(), proc=proc)
    return _state["proc"]  # type: ignore[return-value]


def _send(message: dict[str, str]) -> None:
    with _lock:
        proc = _janitor()
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            _state["pid"] = None


def watch(kind: str, target: str, extra: str = "") -> None:
    """Register something to remove if this process dies first: ``("workspace", path)``,
    ``("cgroup", path)`` or ``("container", id, base_url)``."""
    _send({"op": "watch", "kind": kind, "target": target, "extra": extra})


def forget(kind: str, target: str) -> None:
    """Unregister something this process removed itself."""
    _send({"op": "forget", "kind": kind, "target": target})


def _clean(items: dict[tuple[str, str], str]) -> None:
    import time

    time.sleep(0.2)  # sandboxes die with their parent: let them go first
    mounted = mounted_paths()
    clients: dict[str, object] = {}
    for (kind, target), extra in items.items():
        try:
            if kind == "workspace":
                teardown(target, target in mounted)
            elif kind == "cgroup":
                for _ in range(50):
                    try:
                        os.rmdir(target)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)
            elif kind == "container":
                import docker

                if extra not in clients:
                    clients[extra] = (
                        docker.DockerClient(base_url=extra) if extra else docker.from_env()
                    )
                clients[extra].containers.get(target).remove(force=True)  # type: ignore[attr-defined]
        except Exception:
            continue


def main() -> None:
    items: dict[tuple[str, str], str] = {}
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
            key = (message["kind"], message["target"])
        except (ValueError, KeyError, TypeError):
            continue
        if message.get("op") == "watch":
            items[key] = message.get("extra", "")
        else:
            items.pop(key, None)
    if items:
        _clean(items)


if __name__ == "__main__":
    main()

"""The host side of a sandbox's workspace: a quota, a teardown code cannot defeat, no leaks.

- Quota: when this process may mount (root), every workspace is its own tmpfs with a byte
  (``size=``) and an inode (``nr_inodes=``) limit, so one sandbox cannot fill the host disk or
  create a million files. Elsewhere the workspace is a plain folder bounded per file only
  (RLIMIT_FSIZE).
- Teardown: unmounting (``MNT_DETACH``) drops the whole tree at once, whatever its depth;
  a plain folder is removed iteratively and never through a symlink the code planted
  (`forge_agent.sandbox.tree_removal.remove_tree`: directory descriptors, no recursion).
- No leaks: a workspace is removed by `Workspace.remove`, when its object is collected, at
  interpreter exit, and, for processes that were killed before any of those could run, by the
  process's janitor (`forge_agent.sandbox.janitor`) and by `sweep_stale` (folder names carry
  the owning pid; a later sandbox of any process removes the workspaces of owners that no
  longer exist).

Its files, written and read from the host: `forge_agent.sandbox.workspace_files`.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import weakref

from forge_agent.sandbox import janitor
from forge_agent.sandbox.mounts import mount_tmpfs, mounted_paths, teardown
from forge_agent.sandbox.tree_removal import remove_tree

__all__ = ["Workspace", "remove_tree", "sweep_stale"]


def _new_folder(root: str, prefix: str) -> str:
    """A new folder `root/prefix<random>` (mode 0700), registered with the janitor before it
    exists: an env worker serves several envs on threads, so it can be killed (its step timed
    out, another env crashed it) between any two lines of another env's sandbox setup."""
    while True:
        path = os.path.join(root, prefix + secrets.token_hex(4))
        janitor.watch("workspace", path)
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            janitor.forget("workspace", path)


def sweep_stale(root: str | None = None, prefix: str = "forge-ws-") -> int:
    """Remove workspaces under `root` (default: the temp folder) whose owning process is gone.

    Returns how many were removed.
    """
    root = root or tempfile.gettempdir()
    removed = 0
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    mounted = mounted_paths()
    for name in names:
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        path = os.path.join(root, name)
        teardown(path, path in mounted)
        removed += 1
    return removed


class Workspace:
    """A fresh host folder for one sandbox, named ``<prefix><pid>-<random>``.

    Args:
        size_mb: byte quota (tmpfs ``size``) where mounting is possible.
        max_files: inode quota (tmpfs ``nr_inodes``) where mounting is possible.
        owner: (uid, gid) that should own the folder, or None for this process's.
        root: parent folder (default: the temp folder).
        prefix: name prefix; `sweep_stale` looks for it.
    """

    def __init__(
        self,
        size_mb: int,
        max_files: int,
        owner: tuple[int, int] | None = None,
        root: str | None = None,
        prefix: str = "forge-ws-",
    ) -> None:
        sweep_stale(root, prefix)
        self.path = _new_folder(root or tempfile.gettempdir(), f"{prefix}{os.getpid()}-")
        self.mounted = mount_tmpfs(self.path, size_mb, max_files, owner)
        os.chmod(self.path, 0o700)
        if owner is not None:
            os.chown(self.path, *owner)
        self._finalizer = weakref.finalize(self, teardown, self.path, self.mounted)

    def remove(self) -> None:
        """Unmount and delete the workspace (idempotent)."""
        if self._finalizer.alive:
            self._finalizer()
            janitor.forget("workspace", self.path)

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
"""

from __future__ import annotations

import ctypes
import os
import secrets
import tempfile
import weakref

from forge_agent.sandbox import janitor
from forge_agent.sandbox.tree_removal import remove_tree

__all__ = ["Workspace", "remove_tree", "sweep_stale"]

MNT_DETACH = 2
_libc = None


def _mount_tmpfs(path: str, size_mb: int, max_files: int, owner: tuple[int, int] | None) -> bool:
    """Mount a bounded tmpfs on `path`; False where this process may not mount."""
    global _libc
    if os.geteuid() != 0:
        return False
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = owner or (os.getuid(), os.getgid())
    options = f"size={int(size_mb)}m,nr_inodes={int(max_files)},mode=0700,uid={uid},gid={gid}"
    flags = ctypes.c_ulong(0x2 | 0x4)  # MS_NOSUID | MS_NODEV (code may exec its own scripts)
    rc = _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, options.encode())
    return rc == 0


def _unmount(path: str) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.umount2(os.fsencode(path), MNT_DETACH)


def _teardown(path: str, mounted: bool) -> None:
    if mounted:
        _unmount(path)
    remove_tree(path)


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
    mounted = _mounted_paths()
    for name in names:
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        path = os.path.join(root, name)
        _teardown(path, path in mounted)
        removed += 1
    return removed


def _mounted_paths() -> set[str]:
    try:
        with open("/proc/self/mounts") as f:
            return {line.split()[1] for line in f if len(line.split()) > 1}
    except OSError:
        return set()


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
        self.mounted = _mount_tmpfs(self.path, size_mb, max_files, owner)
        os.chmod(self.path, 0o700)
        if owner is not None:
            os.chown(self.path, *owner)
        self._finalizer = weakref.finalize(self, _teardown, self.path, self.mounted)

    def remove(self) -> None:
        """Unmount and delete the workspace (idempotent)."""
        if self._finalizer.alive:
            self._finalizer()
            janitor.forget("workspace", self.path)

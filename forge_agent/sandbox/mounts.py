"""Workspace mounts: a bounded tmpfs on a workspace folder, and taking one down.

Used by `Workspace` (which makes them) and by the janitor process (which takes down what a
dead process left); neither imports the other.
"""

from __future__ import annotations

import ctypes
import os

from forge_agent.sandbox.tree_removal import remove_tree

MNT_DETACH = 2
_libc = None


def mount_tmpfs(path: str, size_mb: int, max_files: int, owner: tuple[int, int] | None) -> bool:
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


def teardown(path: str, mounted: bool) -> None:
    """Unmount `path` if it is a mount, then remove it without following any link."""
    if mounted:
        _unmount(path)
    remove_tree(path)


def mounted_paths() -> set[str]:
    """The mount points of this process's mount namespace."""
    try:
        with open("/proc/self/mounts") as f:
            return {line.split()[1] for line in f if len(line.split()) > 1}
    except OSError:
        return set()

"""Deleting folders a sandbox could write, without ever following a link it planted.

Code in a sandbox (or in a process a session spawned, which keeps running) can replace any
folder it can write with a symlink to a host path at any moment. A removal that works on path
names (``chmod(path)``, ``scandir(path)``, ``unlink(path + "/" + name)``) resolves those
names again at each step, so a swap between two steps sends it into the host folder the
link names: it would open that folder up and delete its files.

Everything here works on directory descriptors instead: a folder is opened relative to the
descriptor of its parent with ``O_NOFOLLOW | O_DIRECTORY`` (a link fails to open, and is then
unlinked as a link), listed through its descriptor, and its entries are unlinked and removed
relative to it (``unlinkat``). A folder the code made unreadable is opened with ``O_PATH`` and
its mode changed through that descriptor's ``/proc/self/fd`` entry (the very inode, never a
name). Depth costs no recursion and at most `MAX_OPEN_DEPTH` open descriptors: a folder
deeper than that is first moved up to the top folder (``renameat``, which never follows a
link either) and removed from there.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat

__all__ = ["MAX_OPEN_DEPTH", "empty_folder", "remove_tree"]

MAX_OPEN_DEPTH = 64
"""The most folder descriptors one removal holds open at once."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PASSES = 4  # a tree that keeps gaining entries while it is removed is given up after these
_moved = itertools.count()


def remove_tree(path: str) -> None:
    """Delete `path` and everything under it, never following a symlink (any depth).

    `path`'s parent must be a folder the sandbox cannot write (the host's temp folder, a
    sandbox's control folder); everything from `path` down may be changing under us.
    """
    parent, name = os.path.split(os.path.normpath(path))
    try:
        parent_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        _remove_entry(parent_fd, name)
    finally:
        os.close(parent_fd)


def empty_folder(path: str) -> None:
    """Delete everything inside the folder `path` (kept), never following a symlink.

    `path` itself must not be replaceable by the sandbox (its parent is the host's).
    """
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        for _ in range(_PASSES):
            if _empty(fd):
                return
    finally:
        os.close(fd)


def _remove_entry(parent_fd: int, name: str) -> None:
    """Remove `name` in the folder `parent_fd`: a link or file is unlinked, a folder emptied
    and removed."""
    for _ in range(_PASSES):
        if _unlink(parent_fd, name):
            return
        fd = _open_folder(parent_fd, name)
        if fd is None:
            continue  # gone, or no longer a folder: unlink again
        try:
            _empty(fd)
        finally:
            os.close(fd)
        try:
            os.rmdir(name, dir_fd=parent_fd)
            return
        except FileNotFoundError:
            return
        except OSError:  # it gained entries meanwhile (or became something else): again
            continue


def _unlink(dir_fd: int, name: str) -> bool:
    """Unlink a non-folder `name`; True when it is gone, False when it is a folder."""
    try:
        os.unlink(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return True
    except IsADirectoryError:
        return False
    except PermissionError:  # EPERM for a folder on some systems; a read-only parent else
        try:
            return not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return True


def _open_folder(parent_fd: int, name: str) -> int | None:
    """A descriptor on the folder `name` in `parent_fd`, opened up (mode 0700) when the code
    closed it; None when `name` is gone or is not a folder (a symlink is never followed)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink: never followed, unlinked by the caller
            return None
        if exc.errno != errno.EACCES:
            raise
        fd = _open_closed_folder(parent_fd, name)
        if fd is None:
            return None
    with contextlib.suppress(OSError):  # through the descriptor: the very folder we opened
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o700 != 0o700:
            os.fchmod(fd, 0o700)
    return fd


def _open_closed_folder(parent_fd: int, name: str) -> int | None:
    """Open a folder whose mode denies us reading it: change its mode through an ``O_PATH``
    descriptor (the inode itself, not the name), then open it for reading."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        path_fd = os.open(name, flags, dir_fd=parent_fd)
    except OSError:
        return None
    try:
        os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
    except OSError:
        return None
    finally:
        os.close(path_fd)
    try:  # a swap between the two opens yields a link (refused here) or another folder
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return None


def _empty(top_fd: int) -> bool:
    """Delete everything inside the folder `top_fd`; True when it was found empty at the end.

    Walks down one sub-folder at a time, holding a descriptor per level; at
    `MAX_OPEN_DEPTH` levels the next sub-folder is moved up into the top folder instead.
    """
    stack: list[int] = [top_fd]  # descriptors of the folders being emptied, top first
    names: list[str] = []  # names[i] is stack[i + 1]'s name in stack[i]
    try:
        while True:
            fd = stack[-1]
            sub = _first_subfolder(fd)
            if sub is None:
                if len(stack) == 1:
                    return True
                os.close(stack.pop())
                name = names.pop()
                with contextlib.suppress(OSError):  # a new entry: the parent is listed again
                    os.rmdir(name, dir_fd=stack[-1])
                continue
            child = _open_folder(fd, sub)  # opened up, so that it can also be moved
            if child is None:
                if not _unlink(fd, sub):  # a folder we cannot open: give up on this tree
                    return False
                continue
            if len(stack) >= MAX_OPEN_DEPTH:
                os.close(child)
                _move_up(fd, sub, top_fd)
                continue
            stack.append(child)
            names.append(sub)
    finally:
        for fd in stack[1:]:
            os.close(fd)


def _first_subfolder(fd: int) -> str | None:
    """Unlink every non-folder in the folder `fd` until a sub-folder turns up; its name."""
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) or not _unlink(fd, entry.name):
                return entry.name
    return None


def _move_up(fd: int, name: str, top_fd: int) -> None:
    """Move the folder `name` of `fd` into the top folder under a fresh name."""
    for _ in range(100):
        target = f".forge-rm-{os.getpid()}-{next(_moved)}"
        try:
            os.rename(name, target, src_dir_fd=fd, dst_dir_fd=top_fd)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise

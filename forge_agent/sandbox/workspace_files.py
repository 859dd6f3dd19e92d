"""Files in a sandbox's workspace, from the host: where the workspace is inside every sandbox
(`WORKSPACE`), which paths name a file in it (`normalize_workspace_path`), and writing and
reading its files without ever following a symlink the sandboxed code planted
(`host_write_file`, `host_read_file`: every component is opened with ``O_NOFOLLOW`` under a
directory descriptor).

The workspace folder itself (its quota, its teardown) is `forge_agent.sandbox.workspace`.
"""

from __future__ import annotations

import os
import posixpath
import stat

__all__ = [
    "WORKSPACE",
    "FileData",
    "host_read_file",
    "host_write_file",
    "normalize_workspace_path",
]

FileData = str | bytes
"""File contents: text is written as UTF-8."""

WORKSPACE = "/workspace"
"""Where the workspace is mounted inside every sandbox (and the working directory of runs)."""


def normalize_workspace_path(path: str) -> str:
    """Validate a path relative to the workspace and return it normalized.

    Raises:
        ValueError: for absolute paths, ``..`` components, empty paths, NUL bytes or text that
            is not valid Unicode (a lone surrogate would name a file of undecodable bytes).
    """
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"path must be a non-empty relative path, got {path!r}")
    if "\x00" in path:
        raise ValueError(f"path {path!r} contains a NUL byte")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"path {path!r} is not valid Unicode text (a lone surrogate at character "
            f"{exc.start}); file names must be valid UTF-8"
        ) from None
    if path.startswith(WORKSPACE + "/"):
        path = path[len(WORKSPACE) + 1 :]
    if posixpath.isabs(path):
        raise ValueError(f"path {path!r} is absolute; use a path relative to the workspace")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"path {path!r} leaves the workspace ('..' is not allowed)")
    if not parts:
        raise ValueError(f"path {path!r} names the workspace itself, not a file")
    return "/".join(parts)


def _open_parent(root: str, parts: list[str], create: bool, owner: tuple[int, int] | None) -> int:
    """Open the directory holding ``parts[-1]`` under `root` without following any symlink."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                if owner is not None:
                    os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def host_write_file(
    root: str, path: str, data: FileData, owner: tuple[int, int] | None = None
) -> None:
    """Write a workspace file from the host, refusing to follow symlinks the sandbox planted."""
    parts = normalize_workspace_path(path).split("/")
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    dir_fd = _open_parent(root, parts, create=True, owner=owner)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(parts[-1], flags, 0o644, dir_fd=dir_fd)
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(payload)
        finally:
            os.close(fd)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write workspace file {path!r}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


def host_read_file(root: str, path: str, max_bytes: int) -> str:
    """Read a workspace file from the host without following symlinks; at most `max_bytes`."""
    parts = normalize_workspace_path(path).split("/")
    try:
        dir_fd = _open_parent(root, parts, create=False, owner=None)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file in the workspace: {path!r}") from None
    except NotADirectoryError:
        raise FileNotFoundError(f"no such file in the workspace: {path!r}") from None
    except OSError as exc:  # ELOOP: a component is a symlink
        raise PermissionError(f"cannot read {path!r}: {exc.strerror}") from None
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file in the workspace: {path!r}") from None
        except OSError as exc:
            raise PermissionError(f"cannot read {path!r}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise IsADirectoryError(f"{path!r} is not a regular file")
            data = f.read(max_bytes + 1)
    finally:
        os.close(dir_fd)
    text = data[:max_bytes].decode("utf-8", errors="replace")
    if len(data) > max_bytes:
        text += f"\n[sandbox] file truncated to its first {max_bytes} bytes"
    return text

"""Tools for working in a repository in the episode's sandbox: list, search and edit files.

With `read_file`, `write_file` (tools/files.py) and `shell` (tools/shell.py) they make the tool
set of repository tasks. Listing and searching run in the sandbox (`find`, `grep`); edits go
through the session's file API, which never follows links out of the workspace.
"""

from __future__ import annotations

from forge_agent.sandbox import SandboxSession, normalize_workspace_path
from forge_agent.sandbox.base import READ_FILE_MAX_BYTES

__all__ = ["edit_file", "list_files", "search_files"]

MAX_LISTED = 200


def _folder(path: str) -> str:
    """A workspace folder as a command operand: always `./...`, so a path the model gives can
    never read as an option (`find -delete` would delete the workspace)."""
    return "." if path.strip() in ("", ".", "./") else "./" + normalize_workspace_path(path)


def list_files(path: str = ".", *, sandbox: SandboxSession) -> str:
    """List the files under a folder of the repository (recursively, hidden ones left out).

    Args:
        path: The folder relative to the repository root, for example "src" (default: the root).
    """
    try:
        folder = _folder(path)
    except ValueError as exc:
        return f"Error: {exc}"
    run = sandbox.run(
        argv=["find", folder, "-type", "f", "-not", "-path", "*/.*", "-not", "-name", "*.pyc"]
    )
    if not run.ok:
        return f"Error: {run.stderr.strip() or run.describe()}"
    names = sorted(n.removeprefix("./") for n in run.stdout.splitlines() if n)
    shown = names[:MAX_LISTED]
    more = f"\n[{len(names) - MAX_LISTED} more]" if len(names) > MAX_LISTED else ""
    return "\n".join(shown) + more if shown else "(no files)"


def search_files(pattern: str, path: str = ".", *, sandbox: SandboxSession) -> str:
    """Search the repository's files for a regular expression (grep -E), line by line.

    Args:
        pattern: The extended regular expression, for example "def parse".
        path: The folder (or file) to search, relative to the repository root (default: all).
    """
    if not isinstance(pattern, str) or not pattern:
        return "Error: pattern must be a non-empty string"
    try:
        where = _folder(path)
    except ValueError as exc:
        return f"Error: {exc}"
    run = sandbox.run(
        argv=["grep", "-rnIE", "--exclude-dir=__pycache__", "-e", pattern, "--", where]
    )
    if run.exit_code == 1:
        return "(no matches)"
    if not run.ok:
        return f"Error: {run.stderr.strip() or run.describe()}"
    lines = [line.removeprefix("./") for line in run.stdout.splitlines()]
    more = f"\n[{len(lines) - MAX_LISTED} more]" if len(lines) > MAX_LISTED else ""
    return "\n".join(lines[:MAX_LISTED]) + more


def edit_file(path: str, old: str, new: str, *, sandbox: SandboxSession) -> str:
    """Replace one exact occurrence of `old` in a file with `new`.

    Args:
        path: The file relative to the repository root, for example "pkg/core.py".
        old: The exact text to replace; it must occur exactly once in the file.
        new: The text to put in its place.
    """
    if not isinstance(old, str) or not old or not isinstance(new, str):
        return "Error: old must be a non-empty string and new a string"
    try:
        clean = normalize_workspace_path(path)
        text = sandbox.read_file(clean)
    except (ValueError, OSError) as exc:
        return f"Error: {exc}"
    if len(text.encode("utf-8")) >= READ_FILE_MAX_BYTES:  # read back cut at the cap
        return (
            f"Error: {clean} is {READ_FILE_MAX_BYTES // 1_000_000} MB or larger; edit_file "
            "edits smaller files (write_file or shell can change it)"
        )
    count = text.count(old)
    if count != 1:
        return f"Error: the text to replace occurs {count} times in {clean} (it must occur once)"
    sandbox.write_file(clean, text.replace(old, new, 1))
    return f"Edited {clean}"

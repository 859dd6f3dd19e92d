"""The ``read_file`` and ``write_file`` tools: files in the episode's sandbox workspace.

Paths are relative to the workspace; absolute paths and ``..`` are refused with an error
observation, and symlinks are never followed, so a tool call cannot reach outside it.
"""

from __future__ import annotations

from forge_agent.sandbox import SandboxSession, normalize_workspace_path

__all__ = ["read_file", "write_file"]

MAX_READ_CHARS = 20_000
"""Longest text `read_file` returns; the rest is cut with a note."""


def read_file(path: str, *, sandbox: SandboxSession) -> str:
    """Read a text file from the workspace.

    Args:
        path: The file's path relative to the workspace, for example "src/main.py".
    """
    try:
        normalize_workspace_path(path)
        text = sandbox.read_file(path)
    except (ValueError, OSError) as exc:
        return f"Error: {exc}"
    if len(text) > MAX_READ_CHARS:
        text = text[:MAX_READ_CHARS] + f"\n[truncated: showing the first {MAX_READ_CHARS} chars]"
    return text


def write_file(path: str, content: str, *, sandbox: SandboxSession) -> str:
    """Create or overwrite a text file in the workspace (parent directories are created).

    Args:
        path: The file's path relative to the workspace, for example "notes/todo.txt".
        content: The full text to write into the file.
    """
    if not isinstance(content, str):
        return f"Error: content must be a string, got {type(content).__name__}"
    try:
        clean = normalize_workspace_path(path)
        sandbox.write_file(clean, content)
    except (ValueError, OSError) as exc:
        return f"Error: {exc}"
    return f"Wrote {len(content.encode('utf-8'))} bytes to {clean}"

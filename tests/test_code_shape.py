"""Short enough to read in one sitting: no module of forge_agent/, apps/, envs/ or tools/ over
500 lines, no function over 80 (from its `def` line to its last line, docstring included)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("forge_agent", "apps", "envs", "tools")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    skip = REPO / "envs" / "repo_tasks" / "tasks"  # task repositories: data, not project code
    return [
        path
        for folder in FOLDERS
        for path in sorted((REPO / folder).rglob("*.py"))
        if skip not in path.parents
    ]


def _too_long(path: Path) -> list[str]:
    """What in `path` is past the limits, one line each."""
    text = path.read_text()
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{node.name} at line {node.lineno}: {length} lines")
    return found


def test_no_module_or_function_is_too_long() -> None:
    long = [f"{path.relative_to(REPO)}: {what}" for path in _sources() for what in _too_long(path)]
    assert long == [], "split these by concept:\n" + "\n".join(long)


def test_the_shape_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n")
    assert _too_long(tmp_path / "long.py") == [f"long at line 1: {MAX_FUNCTION_LINES + 1} lines"]


def untyped_parameters(folder: Path) -> list[str]:
    """Parameters of public functions (and `__init__`) under `folder` annotated plain `Any`,
    as `file:line function(parameter)` with the file relative to `folder`."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name.startswith("_") and node.name != "__init__":
                continue
            for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                if arg.annotation is not None and ast.unparse(arg.annotation) == "Any":
                    rel = path.relative_to(folder)
                    found.append(f"{rel}:{node.lineno} {node.name}({arg.arg})")
    return found


def test_the_library_types_its_public_parameters(tmp_path: Path) -> None:
    """No public signature in `forge_agent/` takes a plain `Any`: a value it is passed has a
    type (a library's, under `TYPE_CHECKING` where importing it would cost), `object` where any
    value will do (a value to describe, encode or store), or a named alias that says why it has
    none (`forge_agent.types.ActorMesh`)."""
    assert untyped_parameters(REPO / "forge_agent") == []
    source = "from typing import Any\ndef f(x: Any, y: int) -> None: ...\ndef _g(z: Any): ...\n"
    (tmp_path / "m.py").write_text(source)
    assert [s.split(" ")[1] for s in untyped_parameters(tmp_path)] == ["f(x)"]

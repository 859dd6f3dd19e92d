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


def unexplained_local_imports(folder: Path) -> list[str]:
    """Imports of forge_agent's own modules inside functions under `folder` with no
    `# imported here: <why>` comment (the measured import cost) in the lines above them,
    as `file:line module`. Such an import is invisible to the import graph (tests/test_layers.py
    reads it, farm-like structure tools do not), so each one says why it is not at the top."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                if not any(n == "forge_agent" or n.startswith("forge_agent.") for n in names):
                    continue
                above = lines[max(0, node.lineno - 8) : node.lineno - 1]
                if not any(line.strip().startswith("# imported here:") for line in above):
                    found.append(f"{path.relative_to(folder)}:{node.lineno} {names[0]}")
    return found


def test_the_library_imports_its_own_modules_at_the_top(tmp_path: Path) -> None:
    """A function-local import of a forge_agent module says why (`# imported here: ...`, a
    measured import cost or an error path); every other one is at the top of its module."""
    assert unexplained_local_imports(REPO / "forge_agent") == []
    source = (
        "def f():\n    from forge_agent.types import Message\n\n"
        "def g():\n    # imported here: +2 s of torch, measured\n    import forge_agent.trainer\n"
    )
    (tmp_path / "m.py").write_text(source)
    assert unexplained_local_imports(tmp_path) == ["m.py:2 forge_agent.types"]


def test_every_config_section_lives_in_a_config_module() -> None:
    """A newcomer finds a component's config in its package's `config.py`: no class named
    `...Config` is defined anywhere else in forge_agent/ (`typed_config/` is the machinery)."""
    elsewhere = [
        f"{path.relative_to(REPO)}: {node.name}"
        for path in sorted((REPO / "forge_agent").rglob("*.py"))
        if path.name != "config.py" and "typed_config" not in path.parts
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef) and node.name.endswith("Config")
    ]
    assert elsewhere == []

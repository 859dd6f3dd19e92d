"""The library's layers, top to bottom, as the README's Layout writes them: a module imports
only from its own layer or the layers below (function-local imports included). An import that
runs up the layers is a seam in the wrong place."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "forge_agent"

# Top to bottom; a name is a package (folder) or a module of forge_agent/.
LAYERS: list[set[str]] = [
    {"run"},  # the run: config, driver, services, recovery
    {"hosts"},  # where the run's processes live: host meshes, placement, Slurm, host process
    {"warm_start", "evaluation", "endpoint"},  # programs over the engines
    {"rollout"},  # episodes: rendering, the rollout runner
    {"generator", "models"},  # the policy's sampler and the models
    {"env"},  # environments, their tasks and the env pool
    {"trainer", "toolkit"},  # the trainer; the tool machinery: schemas, ToolSet, MCP clients
    {"algorithms", "weights", "observability", "rewards"},
    {"sandbox", "typed_config", "types", "lazy", "memory", "errors", "moved"},  # leaves
]


def _layer_of(name: str) -> int:
    for index, names in enumerate(LAYERS):
        if name in names:
            return index
    raise AssertionError(f"forge_agent.{name} is in no layer of tests/test_layers.py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, first component under forge_agent) of every forge_agent import in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "forge_agent" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def test_no_import_runs_up_the_layers() -> None:
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue
        own = _layer_of(rel.parts[0].removesuffix(".py"))
        for line, target in _imports(path):
            if _layer_of(target) < own:
                upward.append(f"forge_agent/{rel}:{line} imports forge_agent.{target}")
    assert upward == [], "imports that run up the layers:\n" + "\n".join(upward)


def test_every_package_and_module_has_a_layer() -> None:
    for path in ROOT.iterdir():
        if path.name.startswith("_") or path.name == "__pycache__":
            continue
        if path.is_dir() or path.suffix == ".py":
            _layer_of(path.name.removesuffix(".py"))


def test_the_run_config_loads_neither_torch_nor_monarch() -> None:
    code = (
        "import sys; import forge_agent.run.config as c; c.load_config(None, []); "
        "print(sorted(m for m in ('torch', 'monarch', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ---------------------------------------------------------------------------- module circles
REPO = ROOT.parent
PACKAGES = ("forge_agent", "apps", "envs", "tools")


def _module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages."""
    files = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def _module_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that `name` imports, module-level and function-local alike:
    `from a.b import c` names module `a.b.c` when it is one, else `a.b`."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {known(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importer's package, up level - 1
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else known(base))
    return found - {None, name}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def _import_graph() -> dict[str, set[str]]:
    modules = _module_files()
    return {name: _module_imports(name, path, modules) for name, path in modules.items()}


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    graph = _import_graph()
    described = [
        " -> ".join(circle)
        + "\n    "
        + "\n    ".join(f"{a} imports {sorted(graph[a] & set(circle))}" for a in circle)
        for circle in _circles(graph)
    ]
    assert described == [], "modules that import each other in a circle:\n" + "\n".join(described)


def test_the_circle_finder_sees_a_function_local_import(tmp_path: Path) -> None:
    modules = {"pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py"}
    modules["pkg.a"].write_text("from pkg.b import f\n")
    modules["pkg.b"].write_text("def g():\n    from pkg import a\n    return a\n")
    graph = {name: _module_imports(name, path, modules) for name, path in modules.items()}
    assert _circles(graph) == [["pkg.a", "pkg.b"]]

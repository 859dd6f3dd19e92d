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
    {"run"},  # the run: config, driver, services, placement, recovery
    {"warm_start", "evaluation", "endpoint", "bench_util"},  # programs over the engines
    {"rollout"},  # episodes: rendering, the engine
    {"generator", "models"},  # the policy's sampler and the models
    {"env", "mcp"},  # environments, their workers and tasks
    {"trainer", "toolset"},  # the trainer; tools bound to an env
    {"algorithms", "weights", "observability", "rewards", "tool_schema"},
    {"runtime", "sandbox", "typed_config", "types", "lazy", "worker", "errors"},  # leaves
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

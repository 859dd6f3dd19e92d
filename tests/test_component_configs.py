"""Each component is built from its own config section plus what it is handed; only the
driver's setup reads the whole run config (issue 64). The driver's setup is the controller's
setup (`run/controller.py`) and the checks it and `--check` make before any actor starts
(`run/setup_checks.py`, `run/check_episodes.py`); `run/config.py` defines the schema and what
each part is handed (`runner_config`, `service_specs`, `stop_facts`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "forge_agent"
DRIVER_SETUP = {
    "run/config.py",
    "run/controller.py",
    "run/setup_checks.py",
    "run/check_episodes.py",
}
SCHEMA_AGNOSTIC = "typed_config/"  # YAML <-> any config dataclass: its `cfg` is any schema


def _mentions(path: Path) -> list[int]:
    """Lines of `path` that name `AgentConfig`: code (names, attributes, imports, string
    annotations) and prose (docstrings, comments) alike, as `grep` would find them."""
    return [i for i, line in enumerate(path.read_text().splitlines(), 1) if "AgentConfig" in line]


def test_the_run_config_stops_at_the_drivers_setup() -> None:
    found = [
        f"forge_agent/{path.relative_to(ROOT)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if str(path.relative_to(ROOT)) not in DRIVER_SETUP
        for line in _mentions(path)
    ]
    assert found == [], "the whole run config reaches past the driver's setup:\n" + "\n".join(found)


def test_no_component_takes_a_parameter_named_for_the_whole_config() -> None:
    """Below the driver's setup, a parameter called `cfg` is one component's own section; a
    function typed `Any` for it would hide the whole config arriving again."""
    loose = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in DRIVER_SETUP or rel.startswith(SCHEMA_AGNOSTIC):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for arg in node.args.args + node.args.kwonlyargs:
                if arg.arg == "cfg" and (
                    arg.annotation is None or ast.unparse(arg.annotation) in ("Any", "object")
                ):
                    loose.append(f"forge_agent/{rel}:{node.lineno} {node.name}({arg.arg})")
    assert loose == [], "components taking an untyped cfg:\n" + "\n".join(loose)


def test_the_finder_sees_a_mention(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f(cfg: 'AgentConfig') -> None: ...\n")
    assert _mentions(module) == [1]

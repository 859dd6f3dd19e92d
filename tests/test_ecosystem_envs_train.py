"""Environments of other ecosystems train end to end on the real stack (Monarch actors, vLLM
CPU, env workers), each with its real package and the command of docs/envs.md shortened to two
GRPO steps from the suite's warm-started model: two reasoning-gym tasks in one run (its
`composite`, with the calculator tool) and a verifiers tool environment (the page's module).
The repository tasks' command is checked by tests/test_docs_commands.py and their episodes by
tests/test_env_repo_tasks.py (a training run of it costs ~31 s, over the suite's budget).
Plumbing tests, not learning claims: `short_training` adds the `likelier_is_better` reward so
that groups differ."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from forge_agent.run.config import load_config
from tests.helpers import short_training
from tests.user_envs import docs_commands, docs_verifiers_package, remove_user_package


def _short(policy: Path, out: Path) -> list[str]:
    return [
        *short_training(policy, out),
        "rollout.max_turns=2",
        "rollout.max_new_tokens_per_turn=24",
        "rollout.max_concurrent_episodes=8",
        "services.env.num_replicas=1",
        "eval.every=2",
        "eval.num_tasks=2",
        "eval.k=1",
        "checkpoint.every=2",
        "metrics.console=false",
    ]


def _docs_command(prefix: str) -> list[str]:
    (args,) = [a for a in docs_commands() if any(x.startswith(prefix) for x in a)]
    return args


def _train(args: list[str], policy: Path, out: Path) -> dict:
    from forge_agent.run.controller import train

    return asyncio.run(train(load_config(None, [*args, *_short(policy, out)])))


def _check_run(summary: dict, out: Path, policy: Path, seen_text: str) -> list[dict]:
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    start = load_file(str(next(Path(policy).glob("*.safetensors"))))
    final = load_file(str(next((out / "checkpoints").glob("step_*/policy/*.safetensors"))))
    assert any(not torch.equal(start[k], final[k]) for k in start), "weights did not change"
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(traces) >= 2 * 2 * 4
    assert seen_text in (out / "traces.jsonl").read_text()
    statuses = {t["status"] for t in traces}  # no env errors or timeouts
    assert statuses <= {"ok", "truncated_length", "truncated_turns"}, statuses
    return traces


def test_plumbing_two_reasoning_gym_tasks_and_a_tool_train_with_an_added_reward(
    policy_model_path, tmp_path
):
    args = _docs_command("env.id=reasoning_gym:composite")
    summary = _train(args, policy_model_path, tmp_path / "run")
    traces = _check_run(summary, tmp_path / "run", policy_model_path, "legs")
    assert "Calculate" in json.dumps(traces)  # both tasks were played


@pytest.fixture
def vf_package(tmp_path):
    root = docs_verifiers_package(tmp_path / "pkg")
    yield root
    remove_user_package(root)


def test_plumbing_a_verifiers_tool_environment_trains_with_an_added_reward(
    vf_package, policy_model_path, tmp_path
):
    args = _docs_command("env.id=verifiers:my_vf_envs.lookup")
    summary = _train(args, policy_model_path, tmp_path / "run")
    _check_run(summary, tmp_path / "run", policy_model_path, "What is the code of")

"""Three envs the library has never heard of train end to end on the real stack (Monarch actors,
vLLM CPU, env workers): the `ReverseEnv` file of docs/envs.md (copied from the page into a
temporary package), `blackjack` through the Gymnasium adapter, and an OpenEnv server started
here on loopback and named only by its URL. Each run is the page's own command, shortened to
two GRPO steps from the shared warm-started tiny model: weights change, eval runs, traces are
written. Plumbing tests, not learning claims: `short_training` adds the `likelier_is_better`
reward so that groups differ and the weights move."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from forge_agent.run.config import load_config
from tests.helpers import short_training
from tests.user_envs import docs_commands, docs_reverse_package, remove_user_package


def _short(policy: Path, out: Path) -> list[str]:
    return [
        *short_training(policy, out),  # all three share the suite's warm-started model
        "rollout.max_turns=3",
        "rollout.max_new_tokens_per_turn=32",
        "rollout.max_total_tokens=384",
        "rollout.max_concurrent_episodes=8",
        "services.env.num_replicas=2",
        "eval.every=2",
        "eval.num_tasks=2",
        "eval.k=1",
        "checkpoint.every=2",
        "metrics.console=false",
    ]


def _docs_command(env_id_prefix: str) -> list[str]:
    (args,) = [a for a in docs_commands() if any(x.startswith(env_id_prefix) for x in a)]
    return args


def _train(args: list[str], policy: Path, out: Path) -> dict:
    from forge_agent.run.controller import train

    return asyncio.run(train(load_config(None, [*args, *_short(policy, out)])))


def _check_run(summary: dict, out: Path, policy: Path, seen_text: str) -> None:
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    start = load_file(str(next(Path(policy).glob("*.safetensors"))))
    final = load_file(str(next((out / "checkpoints").glob("step_*/policy/*.safetensors"))))
    assert any(not torch.equal(start[k], final[k]) for k in start), "weights did not change"
    assert [e["step"] for e in summary["evals"]] == [0, 2]
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(traces) >= 2 * 2 * 4  # two steps of 2 groups x 4 episodes, plus evals
    assert seen_text in (out / "traces.jsonl").read_text()
    statuses = {t["status"] for t in traces}  # no env errors or timeouts
    assert statuses <= {"ok", "truncated_length", "truncated_turns"}, statuses


@pytest.fixture(scope="module")
def reverse_package(tmp_path_factory):
    root = docs_reverse_package(tmp_path_factory.mktemp("docs_pkg"))
    yield root
    remove_user_package(root)


def test_plumbing_docs_reverse_env_trains_with_an_added_reward(
    reverse_package, policy_model_path, tmp_path
):
    args = _docs_command("env.id=my_envs.reverse:ReverseEnv")
    summary = _train(args, policy_model_path, tmp_path / "run")
    _check_run(summary, tmp_path / "run", policy_model_path, "Reverse the word")


def test_plumbing_blackjack_through_the_gymnasium_adapter_trains_with_an_added_reward(
    policy_model_path, tmp_path
):
    args = _docs_command("env.id=blackjack")
    summary = _train(args, policy_model_path, tmp_path / "run")
    _check_run(summary, tmp_path / "run", policy_model_path, "Your hand sums to")


def test_plumbing_openenv_server_named_by_url_trains_with_an_added_reward(
    reverse_package, policy_model_path, tmp_path
):
    from forge_agent.env import serve_openenv

    docs_url = "http://127.0.0.1:8000"
    args = _docs_command(f"env.id={docs_url}")
    with serve_openenv("my_envs.reverse:ReverseEnv", port=0, block=False) as server:
        args = [a.replace(docs_url, server.url) for a in args]
        summary = _train(args, policy_model_path, tmp_path / "run")
    _check_run(summary, tmp_path / "run", policy_model_path, "Reverse the word")

"""docs/agents.md, run as written: its ~30-line openai-client agent and reward are copied into
a temporary package and trained with the page's command (shortened to two GRPO steps from the
suite's warm-started tiny model) on the real stack: weights and versions change, the agent's
episodes are recorded token-exactly and traces are written. A plumbing test, not a learning
claim: `short_training` adds the `likelier_is_better` reward so that groups differ."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from forge_agent.run.config import load_config
from tests.helpers import short_training
from tests.user_envs import docs_blocks, make_user_package, remove_user_package

DOCS = Path(__file__).resolve().parents[1] / "docs" / "agents.md"


def test_plumbing_docs_agent_program_trains_with_an_added_reward(policy_model_path, tmp_path):
    blocks = docs_blocks(DOCS)
    (lang, program), command = blocks[0], blocks[1]
    assert lang == "python" and "async def agent(task, client)" in program
    assert len(program.splitlines()) <= 45
    argv = shlex.split(command[1].replace("\\\n", " "))
    assert argv[:3] == ["python", "-m", "apps.agent.main"]
    root = make_user_package(
        tmp_path / "pkg", {"my_agents/__init__.py": "", "my_agents/calc.py": program}
    )
    out = tmp_path / "run"
    short = [
        *short_training(policy_model_path, out),
        "rollout.max_concurrent_episodes=8",
        "services.env.num_replicas=4",
        "eval.every=2",  # before and after training, through the reward actor
        "eval.num_tasks=2",
        "eval.k=2",
        "checkpoint.every=2",
        "metrics.console=false",
    ]
    try:
        from forge_agent.run.controller import train

        summary = asyncio.run(train(load_config(None, [*argv[3:], *short])))
    finally:
        remove_user_package(root)
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    start = load_file(str(next(Path(policy_model_path).glob("*.safetensors"))))
    final = load_file(str(next((out / "checkpoints").glob("step_*/policy/*.safetensors"))))
    assert any(not torch.equal(start[k], final[k]) for k in start), "weights did not change"
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(traces) >= 2 * 2 * 4
    assert {t["status"] for t in traces} == {"ok"}, {t["status"] for t in traces}
    for t in traces:  # the page's reward ran in the reward actor: its dict is in the breakdown
        parts = t["info"]["reward_breakdown"]
        shaping = "tests.user_envs:likelier_is_better"
        assert set(parts) == {"agent_reward/correct", shaping}
        assert t["reward"] == pytest.approx(parts["agent_reward/correct"] + 0.1 * parts[shaping])
        sampled = [i for i, m in enumerate(t["loss_mask"]) if m]
        assert sampled and all(t["versions"][i] >= 0 for i in sampled)
    assert max(v for t in traces for v in t["versions"]) >= 1  # later episodes: new weights
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # eval episodes were scored by the reward actor (before and after training)
    evals = [m for m in metrics if "eval/reward/agent_reward/correct" in m["metrics"]]
    assert len(evals) == 2, [sorted(m["metrics"]) for m in metrics]
    assert [e["eval/episodes"] for e in summary["evals"]] == [4.0, 4.0]

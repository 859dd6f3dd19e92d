"""A short GRPO run of the real stack on the sql_mcp env: the policy's tool calls go to the real
mcp-server-sqlite inside each episode's bubblewrap sandbox, and the weights change.

The policy is the suite's shared warm-started model (it already writes Qwen3 tool calls, for
calculator and code_exec) after a few more supervised steps on sql_mcp's own demonstrations,
taken from the env through the env seam as `warm_start` takes them in a run (cached on disk).

A plumbing test, not a learning claim: `short_training` adds the `likelier_is_better` reward so
that groups differ and the weights move; learning on sql_mcp's own reward is issue 26's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.run.config import load_config
from tests.helpers import short_training
from tests.mcp_servers import require_servers

ENV = "envs.sql_mcp:SqlMcpEnv"  # the entry point itself: no installed metadata needed


@pytest.fixture(scope="module")
def sql_policy(policy_model_path) -> Path:
    """The shared policy after a short supervised pass on sql_mcp demonstrations (cached)."""
    from forge_agent.warm_start import WarmStartConfig, warm_start

    require_servers()
    cfg = WarmStartConfig(steps=40, batch_size=16, lr=2e-3, demo_fraction=1.0, num_demos=96)
    return warm_start(policy_model_path, [ResolvedEnv.of(ENV)], cfg)


def test_plumbing_sql_mcp_trains_with_an_added_reward_and_its_traces_show_mcp_tool_calls(
    sql_policy, tmp_path
) -> None:
    from forge_agent.run.controller import train

    out = tmp_path / "sql_mcp_run"
    cfg = load_config(
        None,
        [
            *short_training(sql_policy, out),
            f"env.id={ENV}",
            "env.kwargs={}",
            # one read_query call (about 64 tokens in the tiny tokenizer), then the number
            "rollout.max_turns=2",
            "rollout.temperature=1.0",  # peaked policy: at 0.6 every group was identical
            "rollout.max_new_tokens_per_turn=80",
            "rollout.max_total_tokens=400",
            "rollout.max_concurrent_episodes=8",
            "services.env.num_replicas=2",
            "eval.every=0",
            "checkpoint.every=2",
            "metrics.console=false",
        ],
    )
    summary = asyncio.run(train(cfg))
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    start = load_file(str(next(sql_policy.glob("*.safetensors"))))
    final = load_file(str(next((out / "checkpoints").glob("step_*/policy/*.safetensors"))))
    assert any(not torch.equal(start[k], final[k]) for k in start), "weights did not change"
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(traces) >= 2 * 2 * 4  # two steps of 2 groups x 4 (the producer may run ahead)
    statuses = {t["status"] for t in traces}  # no env errors, sandbox failures or timeouts
    assert statuses <= {"ok", "truncated_length", "truncated_turns"}, statuses
    # Tool results that answer a read_query call: the real server's rows (its format, a list
    # of row dicts) for at least one call, not only error text.
    results = []
    for t in traces:
        names = {
            call["id"]: call["function"]["name"]
            for m in t["messages"]
            if m["role"] == "assistant"
            for call in m.get("tool_calls") or []
        }
        results += [
            m["content"]
            for m in t["messages"]
            if m["role"] == "tool" and names.get(m.get("tool_call_id")) == "read_query"
        ]
    assert len(results) >= 4, [t["messages"][2:] for t in traces[:2]]
    assert any(r.startswith("[{") for r in results), results[:5]

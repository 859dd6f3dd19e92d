"""A multi-seat env trains end to end on the real stack (Monarch actors, vLLM CPU, env workers,
the weight store): one run of a four-seat game whose seats are played by the policy twice
(self-play), a frozen snapshot one version behind (from the weight store) and a scripted
player, two GRPO steps from the suite's warm-started model. Plumbing, not a learning claim
(`short_training` adds a reward on the samples' likelihood so that groups differ)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from forge_agent.run.config import load_config
from tests.helpers import short_training


def test_plumbing_self_play_snapshot_and_scripted_seats_train_two_steps(
    policy_model_path, tmp_path
):
    from forge_agent.run.controller import train

    out = tmp_path / "run"
    args = [
        *short_training(policy_model_path, out),
        "env.id=tests.seat_envs:FourSeatGame",
        "env.kwargs={rounds: 1}",
        # the opponents move first, so every policy episode has seen both play
        "env.seats={player_0: snapshot:-1, player_1: tests.seat_envs:say_seven, "
        "player_2: policy, player_3: policy}",
        "weight_store.max_versions=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens_per_turn=32",
        "training.group_size=2",
        "services.env.num_replicas=1",
        "eval.every=0",
        "checkpoint.every=2",
        "metrics.console=false",
    ]
    summary = asyncio.run(train(load_config(None, args)))
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    start = load_file(str(next(Path(policy_model_path).glob("*.safetensors"))))
    final = load_file(str(next((out / "checkpoints").glob("step_*/policy/*.safetensors"))))
    assert any(not torch.equal(start[k], final[k]) for k in start), "weights did not change"
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    statuses = {t["status"] for t in traces}  # no env errors: every opponent answered
    # (a policy seat cut at its token cap loses by forfeit, the default)
    assert statuses <= {"ok", "truncated_length", "truncated_turns", "forfeit"}, statuses
    assert {t["info"]["seat"] for t in traces} == {"player_2", "player_3"}  # policy seats only
    assert traces[0]["info"]["players"] == {
        "player_0": "snapshot:-1",
        "player_1": "tests.seat_envs:say_seven",
        "player_2": "policy",
        "player_3": "policy",
    }
    seen = [json.dumps(t["messages"]) for t in traces if t["info"]["seat"] == "player_2"]
    assert all("player_0 said" in m and "player_1 said 7." in m for m in seen)

"""The random-policy baseline (`apps.bench.random_policy`): the evaluator's held-out tasks and
reward, played by well-formed random tool calls."""

from __future__ import annotations

import json

from apps.bench.random_policy import main


def test_random_policy_baseline_is_a_reward_of_episodes_that_called_tools(tmp_path) -> None:
    out = tmp_path / "random_policy.json"
    args = ["--out", str(out), "eval.num_tasks=4", "eval.k=2", "services.env.num_replicas=1"]

    assert main(args) == 0

    (row,) = json.loads(out.read_text())["rows"]
    assert (row["env"], row["tasks"], row["episodes"]) == ("calculator", 4, 8)
    assert 0.0 <= row["mean_reward"] <= 1.0
    assert row["tool_call_rate"] == 1.0 and row["calls_per_episode"] >= 1.0
    assert row["statuses"] == {"ok": 8}  # every episode ended with its final answer, scored


def test_an_env_id_that_does_not_exist_fails_naming_it(tmp_path, capsys) -> None:
    out = tmp_path / "random_policy.json"

    assert main(["--out", str(out), "env.id=no_such_env"]) == 2

    assert "'no_such_env'" in capsys.readouterr().err
    assert not out.exists()

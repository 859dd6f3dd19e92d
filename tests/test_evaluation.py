"""Evaluation: the pass@k estimator, report aggregation and `evaluate` over real envs.

`evaluate` runs the real rollout engine, renderer and calculator env with a scripted policy in
place of vLLM (a test of the evaluation logic, not of the model).
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from forge_agent.evaluation import EvalReport, evaluate, pass_at_k
from forge_agent.types import Completion, Group, Status, Trajectory


# ---------------------------------------------------------------------------- pass@k
@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [(5, 2, 1, 0.4), (5, 2, 2, 0.7), (5, 0, 3, 0.0), (5, 4, 2, 1.0), (5, 5, 5, 1.0)],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_is_one_when_fewer_than_k_samples_fail():
    assert pass_at_k(10, 8, 3) == 1.0


def test_pass_at_k_equals_the_combinatorial_formula():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1.0 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_1_is_the_pass_rate():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (4, 5, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k needs"):
        pass_at_k(n, c, k)


# ---------------------------------------------------------------------------- aggregation
def _traj(task: str, reward: float, status: Status = Status.OK, tools: int = 0) -> Trajectory:
    return Trajectory(
        task_id=task,
        group_id=task,
        token_ids=[1] * 10,
        loss_mask=[0] * 6 + [1] * 4,
        turn_spans=[(6, 10)],
        reward=reward,
        status=status,
        tool_call_count=tools,
    )


def _groups() -> list[Group]:
    return [
        Group("a", [_traj("a", 1.0, tools=1), _traj("a", 0.0), _traj("a", 1.0, tools=2)]),
        Group("b", [_traj("b", 0.0), _traj("b", 0.0, Status.TRUNCATED_LENGTH), _traj("b", 0.5)]),
        Group(
            "c",
            [_traj("c", 1.0), _traj("c", 0.0, Status.ENV_TIMEOUT), _traj("c", 0.0, tools=1)],
        ),
    ]


def test_report_aggregates_pass_rates_per_task():
    report = EvalReport.from_groups(_groups(), k=2)
    # a: n=3, c=2 -> pass@1 2/3, pass@2 1; b: n=3, c=0 -> 0, 0; c: n=3 (one infra, which
    # counts as a failure), c=1 -> 1/3, 2/3
    assert report.pass_at_1 == pytest.approx((2 / 3 + 0 + 1 / 3) / 3)
    assert report.pass_at_k == pytest.approx((1.0 + 0.0 + 2 / 3) / 3)
    assert [(r.task_id, r.n, r.passed) for r in report.per_task] == [
        ("a", 3, 2),
        ("b", 3, 0),
        ("c", 3, 1),
    ]


def test_report_counts_infra_failures_as_failures_in_the_means_and_shows_them():
    report = EvalReport.from_groups(_groups(), k=2)
    assert report.infra_failures == 1
    assert report.num_episodes == 9
    assert report.mean_reward == pytest.approx((1 + 0 + 1 + 0 + 0 + 0.5 + 1 + 0 + 0) / 9)
    assert "infra failures" in report.table() and "counted as failures" in report.table()
    assert report.tool_call_rate == pytest.approx(3 / 8)
    assert report.tool_calls_per_episode == pytest.approx(4 / 8)
    assert report.status_counts == {"ok": 7, "truncated_length": 1, "env_timeout": 1}


def test_partial_reward_does_not_pass_by_default_but_passes_a_lower_threshold():
    groups = [Group("b", [_traj("b", 0.5)])]
    assert EvalReport.from_groups(groups, k=1).pass_at_1 == 0.0
    assert EvalReport.from_groups(groups, k=1, pass_threshold=0.5).pass_at_1 == 1.0


def test_task_with_only_infra_failures_counts_as_failed_and_is_named():
    groups = [
        Group("a", [_traj("a", 1.0), _traj("a", 1.0)]),
        Group("z", [_traj("z", 1.0, Status.GENERATOR_ERROR)] * 2),
    ]
    report = EvalReport.from_groups(groups, k=2)
    assert report.pass_at_k == 0.5 and report.pass_at_1 == 0.5
    assert report.tasks_without_scored_episodes == 1


def test_report_metrics_carry_the_prefix_and_k():
    metrics = EvalReport.from_groups(_groups(), k=2).as_metrics(prefix="heldout/")
    assert metrics["heldout/pass@2"] == pytest.approx((1.0 + 0.0 + 2 / 3) / 3)
    assert metrics["heldout/status/env_timeout"] == 1.0
    assert metrics["heldout/infra_failures"] == 1.0
    assert all(k.startswith("heldout/") for k in metrics)
    assert all(isinstance(v, float) for v in metrics.values())


def test_report_table_and_json_show_the_headline_numbers():
    report = EvalReport.from_groups(_groups(), k=2)
    table = report.table()
    for name in ("mean reward", "pass@1", "pass@2", "tool-call rate", "env_timeout 1"):
        assert name in table
    assert json.loads(json.dumps(report.to_json()))["per_task"][2]["n"] == 3


# ---------------------------------------------------------------------------- evaluate
class ScriptedPolicy:
    """Calls the calculator on the first turn, then answers `answer`."""

    def __init__(self, tokenizer, answer: str) -> None:
        self.tokenizer = tokenizer
        self.answer = answer
        self.seeds: list[int | None] = []

    async def __call__(self, prompt_ids, sampling, session) -> Completion:
        self.seeds.append(sampling.seed)
        if "<tool_response>" in self.tokenizer.decode(prompt_ids):
            text = self.answer
        else:
            call = {"name": "calculator", "arguments": {"expression": "78 * 52"}}
            text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        return Completion(ids, [-0.1] * len(ids), "stop", policy_version=3)


def _engine(tokenizer, policy, on_trajectory=None):
    from envs.calculator import CalculatorEnv
    from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutConfig, RolloutRunner

    return RolloutRunner(
        policy,
        LocalEnvs(CalculatorEnv),
        ChatRenderer(tokenizer),
        RolloutConfig(max_concurrent_episodes=4),
        on_trajectory=on_trajectory,
    )


TASKS = [
    {"task_id": "right", "prompt": "What is 78 * 52?", "answer": "4056", "expression": "78 * 52"},
    {"task_id": "wrong", "prompt": "What is 11 + 11?", "answer": "22", "expression": "11 + 11"},
]


def test_evaluate_runs_k_episodes_per_task_and_reports_progress(tiny_tokenizer):
    seen = []
    policy = ScriptedPolicy(tiny_tokenizer, "4056")
    engine = _engine(tiny_tokenizer, policy, on_trajectory=seen.append)
    ticks: list[tuple[int, int]] = []
    report = asyncio.run(evaluate(engine, TASKS, k=3, progress=lambda d, t: ticks.append((d, t))))
    assert report.num_episodes == 6 and report.num_tasks == 2
    assert [(r.task_id, r.n, r.passed) for r in report.per_task] == [
        ("right", 3, 3),
        ("wrong", 3, 0),
    ]
    assert report.pass_at_1 == 0.5 and report.pass_at_k == 0.5
    assert report.tool_call_rate == 1.0 and report.mean_turns == 2.0
    assert report.status_counts == {"ok": 6}
    assert ticks == [(i, 6) for i in range(1, 7)]
    assert len(seen) == 6  # the engine's own trajectory hook still runs (traces)
    assert engine.on_trajectory == seen.append  # and is restored afterwards


def test_evaluate_takes_rewards_from_score_when_given(tiny_tokenizer):
    """An agent program's eval episodes carry no env reward; `score` (a reward actor in a
    run) gives them theirs, and the report counts those."""
    from forge_agent.rewards import RewardComponent, Rubric

    rubric = Rubric([RewardComponent("judge", lambda t: float(t.task_id == "wrong"))])

    async def score(trajectories):
        await rubric.score_all(trajectories)
        return trajectories

    engine = _engine(tiny_tokenizer, ScriptedPolicy(tiny_tokenizer, "4056"))
    report = asyncio.run(evaluate(engine, TASKS, k=2, score=score))
    assert [(r.task_id, r.passed) for r in report.per_task] == [("right", 0), ("wrong", 2)]


def test_evaluate_seeds_sampling_so_reruns_see_the_same_noise(tiny_tokenizer):
    first, second = ScriptedPolicy(tiny_tokenizer, "1"), ScriptedPolicy(tiny_tokenizer, "1")
    asyncio.run(evaluate(_engine(tiny_tokenizer, first), TASKS, k=2, seed=4))
    asyncio.run(evaluate(_engine(tiny_tokenizer, second), TASKS, k=2, seed=4))
    assert sorted(first.seeds) == sorted(second.seeds)
    assert len(set(first.seeds)) == len(first.seeds) == 8  # 2 tasks x 2 episodes x 2 turns


def test_apps_eval_reports_held_out_tasks_and_keeps_third_party_logs_off_the_console(
    policy_model_path, tmp_path
):
    """`python -m apps.eval --model FOLDER`: the report on the console, vLLM's and torch's
    output in OUT/eval.log (a first run printed ~10 vLLM/NUMA warnings on the console)."""
    import json
    import subprocess
    import sys

    out = tmp_path / "eval"
    args = ["--model", str(policy_model_path), "--out", str(out), "eval.num_tasks=2", "eval.k=2"]
    run = subprocess.run(
        [sys.executable, "-m", "apps.eval", *args], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads((out / "eval.json").read_text())
    assert report["metrics"]["eval/episodes"] == 4
    console = run.stdout + run.stderr
    for noise in ("vllm", "INFO ", "WARNING ", "NUMA"):
        assert noise not in console, console[-2000:]
    assert "vllm" in (out / "eval.log").read_text().lower()


def test_an_infra_failure_counts_with_its_failure_reward_and_never_passes():
    infra = _traj("a", 1.0, Status.ENV_ERROR)
    infra.info["failure_reward"] = -1.0
    report = EvalReport.from_groups([Group("a", [infra, _traj("a", 1.0)])], k=2)
    assert report.mean_reward == pytest.approx((-1.0 + 1.0) / 2)
    assert report.per_task[0].passed == 1


def test_policy_failures_are_scored_and_counted_not_excluded():
    failed = _traj("a", 0.0, Status.POLICY_ERROR)
    report = EvalReport.from_groups([Group("a", [failed, _traj("a", 1.0)])], k=2)
    assert report.policy_failures == 1 and report.infra_failures == 0
    assert report.num_scored == 2
    assert report.mean_reward == pytest.approx(0.5)
    assert report.as_metrics()["eval/policy_failures"] == 1.0

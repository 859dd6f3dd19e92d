"""The reward-hack suite: scripted adversarial policies try to earn reward without solving the
task, and each test asserts they earn no more than the env's failure reward and are not
excluded as infra (the rule of blame, docs/rewards.md).

The policies are scripted (they say exactly the attack); everything else is real: the
rollout engine, the env worker processes, the shipped envs, the rubric, the evaluator.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from forge_agent.algorithms.advantages import compute_advantages
from forge_agent.env import EnvConfig
from forge_agent.env.worker import EnvPool
from forge_agent.evaluation import evaluate
from forge_agent.rewards import RewardComponent, Rubric
from forge_agent.types import Completion, Group, Status, Trajectory

CALC_TASKS = [
    {
        "task_id": f"t{i}",
        "prompt": f"What is {a} * {b}?",
        "answer": str(a * b),
        "expression": f"{a} * {b}",
    }
    for i, (a, b) in enumerate([(78, 52), (11, 11), (9, 7)])
]


class SaysPolicy:
    """A scripted policy: every turn, the same final message."""

    def __init__(self, tokenizer, text: str) -> None:
        self.tokenizer, self.text = tokenizer, text

    async def __call__(self, prompt_ids, sampling, session) -> Completion:
        ids = self.tokenizer.encode(self.text + "<|im_end|>", add_special_tokens=False)
        return Completion(ids, [-0.1] * len(ids), "stop", policy_version=0)


def _calculator_engine(tokenizer, policy, pool):
    from forge_agent.rollout import ChatRenderer, RolloutConfig, RolloutEngine

    return RolloutEngine(policy, pool, ChatRenderer(tokenizer), RolloutConfig(max_turns=2))


async def _evaluate_in_workers(tokenizer, text: str, k: int = 2):
    async with EnvPool(EnvConfig("calculator", {"difficulty": 1}), size=2) as pool:
        engine = _calculator_engine(tokenizer, SaysPolicy(tokenizer, text), pool)
        return await evaluate(engine, CALC_TASKS, k=k)


@pytest.mark.parametrize(
    "answer",
    [r"\boxed{,}", r"\boxed{" + "7" * 5000 + "}"],
    ids=["empty-after-commas", "5000-digits"],
)
def test_an_answer_that_makes_the_judge_raise_evaluates_at_its_true_rate(tiny_tokenizer, answer):
    """Before: the judge's `int("")` (or Python's int-conversion limit) ended the episode
    `env_error`, excluded, and a policy answering so whenever unsure read 1.00 in eval."""
    report = asyncio.run(_evaluate_in_workers(tiny_tokenizer, answer))
    assert report.status_counts == {"policy_error": 6}
    assert report.infra_failures == 0 and report.policy_failures == 6
    assert report.mean_reward == 0.0 and report.pass_at_1 == 0.0
    assert "policy failures" in report.table()


def test_a_judge_raising_is_trained_on_as_a_failure_not_excluded(tiny_tokenizer):
    async def run() -> list[Trajectory]:
        async with EnvPool(EnvConfig("calculator", {"difficulty": 1}), size=2) as pool:
            engine = _calculator_engine(tiny_tokenizer, SaysPolicy(tiny_tokenizer, "x"), pool)
            right = _calculator_engine(
                tiny_tokenizer, SaysPolicy(tiny_tokenizer, r"\boxed{4056}"), pool
            )
            bad = await engine.run_episode(CALC_TASKS[0], 0)
            bad_boxed = await _calculator_engine(
                tiny_tokenizer, SaysPolicy(tiny_tokenizer, r"\boxed{,}"), pool
            ).run_episode(CALC_TASKS[0], 0)
            good = await right.run_episode(CALC_TASKS[0], 0)
            return [bad, bad_boxed, good]

    wrong, raised, solved = asyncio.run(run())
    assert raised.status is Status.POLICY_ERROR and "ValueError" in raised.info["error"]
    assert raised.reward == 0.0 and raised.info["failure_reward"] == 0.0
    assert solved.reward == 1.0
    kept, stats = compute_advantages([Group("t0", [wrong, raised, solved])])
    assert raised in kept and stats.dropped.get("infra_failure", 0) == 0
    assert raised.advantage < 0 < solved.advantage


def test_a_policy_failure_collects_no_rubric_bonus():
    """A rubric with a bonus component (format, tool use) cannot pay an episode the policy
    failed: it scores the env's failure reward alone."""
    traj = Trajectory(task_id="t", group_id="g", turn_spans=[(0, 1)], turn_rewards=[0.0])
    traj.fail_by_policy(Status.POLICY_TIMEOUT, "step: hung", failure_reward=-1.0)
    rubric = Rubric([RewardComponent("bonus", lambda t: 5.0)])
    asyncio.run(rubric.score_all([traj]))
    assert traj.reward == -1.0
    assert traj.info["reward_breakdown"] == {"policy_failure": -1.0}
    assert traj.turn_rewards == [-1.0]


def test_a_failure_withdraws_rewards_earned_on_earlier_turns():
    traj = Trajectory(task_id="t", group_id="g", turn_spans=[(0, 1), (1, 2)])
    traj.reward_components, traj.turn_rewards = {"progress": 0.8}, [0.8]
    traj.fail_by_policy(Status.POLICY_ERROR, "step: judge raised", failure_reward=0.0)
    assert traj.reward_components == {"policy_failure": 0.0}
    assert traj.turn_rewards == [0.0, 0.0]


# ---------------------------------------------------------------------------- timeouts in layers
def _env_config(env_id: str, **kw) -> EnvConfig:
    return EnvConfig(env_id, kwargs={}, **kw)


@pytest.mark.parametrize("env_id", ["calculator", "multihop", "code_exec", "repo_tasks", "sql_mcp"])
def test_shipped_envs_nest_their_timeouts_under_the_default_step(env_id):
    from forge_agent.run.setup_checks import check_timeout_layers

    check_timeout_layers(_env_config(env_id))  # tool < grader < step at the defaults


def test_a_step_timeout_not_above_the_grader_is_refused_naming_the_key():
    from forge_agent.errors import SetupError
    from forge_agent.run.setup_checks import check_timeout_layers

    with pytest.raises(SetupError, match=r"env\.step_timeout_s.*grader_timeout_s is 25 s"):
        check_timeout_layers(_env_config("code_exec", step_timeout_s=20.0))


def test_eval_report_json_keeps_the_policy_failure_count(tiny_tokenizer):
    report = asyncio.run(_evaluate_in_workers(tiny_tokenizer, r"\boxed{,}", k=1))
    assert json.loads(json.dumps(report.to_json()))["policy_failures"] == 3

"""Reward functions, the weighted Rubric, and scoring through a real Monarch RewardActor."""

from __future__ import annotations

import asyncio
import math

import pytest

from forge_agent.rewards import (
    RewardComponent,
    Rubric,
    boxed_answer_match,
    env_outcome,
    extract_boxed,
    length_penalty,
    model_judge,
    program_reward,
    reward_metrics,
    thinking_format,
    tool_use,
)
from forge_agent.types import Trajectory
from tests.helpers import spawn_test_procs


def traj(answer: str = "", n_sampled: int = 4, **kw) -> Trajectory:
    t = Trajectory(
        task_id="t",
        group_id="g",
        token_ids=[1] * (n_sampled + 2),
        loss_mask=[0, 0] + [1] * n_sampled,
        logprobs=[0.0] * (n_sampled + 2),
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}],
    )
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def test_extract_boxed_handles_nested_braces_and_takes_the_last():
    assert extract_boxed(r"first \boxed{1} then \boxed{\frac{1}{2}} end") == r"\frac{1}{2}"
    assert extract_boxed("no box") is None and extract_boxed(r"\boxed{open") is None


def test_boxed_answer_match_normalises_numbers_and_strips_thinking():
    fn = boxed_answer_match()
    assert (
        fn(
            traj(
                r"<think>maybe \boxed{3}</think>The answer is \boxed{ 42.0 }", info={"answer": "42"}
            )
        )
        == 1.0
    )
    assert fn(traj(r"<think>\boxed{42}</think>so \boxed{41}", info={"answer": 42})) == 0.0
    assert fn(traj("no box", info={"answer": "42"})) == 0.0


def test_thinking_format_scores_the_fraction_of_well_formed_turns():
    fn = thinking_format()
    t = traj("<think>plan</think>answer")
    t.messages.append({"role": "assistant", "content": "<think>a</think><think>b</think>x"})
    assert fn(t) == 0.5
    assert fn(traj("<think>only thinking</think>  ")) == 0.0
    assert (
        fn(traj("plain")) == 0.0 and thinking_format(require_thinking=False)(traj("plain")) == 1.0
    )


def test_length_penalty_follows_dapo_soft_overlong_punishment():
    fn = length_penalty(max_tokens=10, buffer_tokens=4)  # soft limit 10 - 4 = 6
    assert fn(traj(n_sampled=6)) == 0.0
    assert fn(traj(n_sampled=8)) == pytest.approx((6 - 8) / 4)  # -0.5
    assert fn(traj(n_sampled=11)) == -1.0


def test_tool_use_rewards_calls_and_penalises_failed_calls():
    fn = tool_use(error_penalty=0.5)
    assert fn(traj(tool_call_count=0)) == 0.0
    assert fn(traj(tool_call_count=4, tool_error_count=1)) == pytest.approx(1 - 0.5 * 1 / 4)


def test_env_outcome_reads_components_or_info():
    t = traj(reward_components={"solved": 1.0, "bonus": 0.5}, info={"passed": 0.25})
    assert env_outcome()(t) == 1.5
    assert env_outcome("solved")(t) == 1.0 and env_outcome("passed")(t) == 0.25


def test_rubric_weights_components_and_reports_each():
    rubric = Rubric(
        [
            RewardComponent("outcome", env_outcome("solved"), 1.0),
            RewardComponent("tools", tool_use(), 0.5),
            RewardComponent("user", lambda t: t.num_sampled / 10, -1.0),
        ]
    )
    t = traj(reward_components={"solved": 1.0}, tool_call_count=2)
    (res,) = asyncio.run(rubric.score_all([t]))
    # 1.0 * 1.0 + 0.5 * 1.0 + (-1.0) * 0.4 = 1.1
    assert res.total == pytest.approx(1.1) and t.reward == pytest.approx(1.1)
    assert t.info["reward_breakdown"] == {"outcome": 1.0, "tools": 1.0, "user": 0.4}
    assert reward_metrics([res])["reward/user"] == pytest.approx(0.4)


def test_a_dict_reward_is_summed_and_each_entry_is_in_the_breakdown():
    rubric = Rubric([RewardComponent("agent", lambda t: {"correct": 1.0, "style": -0.25}, 2.0)])
    t = traj()
    (res,) = asyncio.run(rubric.score_all([t]))
    assert res.total == pytest.approx(2.0 * 0.75) and t.reward == pytest.approx(1.5)
    assert t.info["reward_breakdown"] == {"agent/correct": 1.0, "agent/style": -0.25}
    assert reward_metrics([res])["reward/agent/style"] == -0.25


def test_only_scores_the_named_components_and_rejects_unknown_names():
    rubric = Rubric([RewardComponent("a", lambda t: 1.0), RewardComponent("b", lambda t: 5.0)])
    t = traj()
    asyncio.run(rubric.score_all([t], only=["a"]))
    assert t.reward == 1.0 and t.info["reward_breakdown"] == {"a": 1.0}
    with pytest.raises(ValueError, match=r"unknown reward components \['c'\]"):
        asyncio.run(rubric.score_all([t], only=["c"]))


def test_program_reward_calls_the_users_fn_with_task_result_and_transcript():
    seen = []

    def reward(task, result, transcript):
        seen.append((task, result, transcript))
        return float(result == task["answer"])

    fn = program_reward(reward)
    t = traj("12", info={"task": {"answer": "12"}, "result": "12"})
    assert fn(t) == 1.0
    assert fn(traj(info={"task": {"answer": "12"}, "result": "13"})) == 0.0
    assert seen[0] == ({"answer": "12"}, "12", t.messages)
    with pytest.raises(KeyError, match="not an agent-program episode"):
        fn(traj())


def test_async_model_judge_component_is_awaited():
    async def judge(prompt: str) -> str:
        await asyncio.sleep(0)
        return "Score: 7" if "42" in prompt else "2"

    rubric = Rubric([RewardComponent("judge", model_judge(judge), 2.0)])
    res = asyncio.run(rubric.score(traj("it is 42")))
    assert res.total == pytest.approx(2.0 * 0.7)


def test_a_raising_or_nan_component_is_excluded_recorded_and_counted():
    def broken(t: Trajectory) -> float:
        raise RuntimeError("judge offline")

    rubric = Rubric(
        [
            RewardComponent("ok", lambda t: 1.0),
            RewardComponent("broken", broken),
            RewardComponent("nan", lambda t: float("nan")),
        ]
    )
    t = traj()
    (res,) = asyncio.run(rubric.score_all([t]))
    assert res.total == 1.0 and math.isfinite(t.reward)
    assert t.info["reward_errors"]["broken"] == "RuntimeError: judge offline"
    assert "non-finite" in t.info["reward_errors"]["nan"]
    assert rubric.failures == {"broken": 1, "nan": 1}
    assert reward_metrics([res])["reward/errors/broken"] == 1.0


def test_a_component_over_its_timeout_fails_without_blocking_the_others():
    async def slow(t: Trajectory) -> float:
        await asyncio.sleep(5)
        return 1.0

    rubric = Rubric(
        [RewardComponent("slow", slow, timeout_s=0.05), RewardComponent("fast", lambda t: 2.0)]
    )
    res = asyncio.run(rubric.score(traj()))
    assert res.total == 2.0 and res.errors["slow"].startswith("TimeoutError")


def test_rubric_rejects_duplicate_names():
    with pytest.raises(ValueError, match=r"duplicate reward component names \['a'\]"):
        Rubric([RewardComponent("a", tool_use()), RewardComponent("a", tool_use())])


def make_rubric() -> Rubric:
    return Rubric(
        [
            RewardComponent("answer", boxed_answer_match(), 1.0),
            RewardComponent("length", length_penalty(10, 4), 0.5),
        ]
    )


@pytest.fixture(scope="module")
def reward_procs():
    procs = spawn_test_procs(2)
    yield procs
    procs.stop().get()


def test_reward_actor_replicas_score_trajectories(reward_procs):
    from forge_agent.rewards.actor import RewardActor

    actor = reward_procs.spawn("reward", RewardActor, make_rubric())
    names = actor.setup.call().get()
    assert [v for _, v in names.items()] == [["answer", "length"]] * 2
    trajs = [
        traj(r"\boxed{7}", n_sampled=8, info={"answer": "7"}),
        traj(r"\boxed{8}", n_sampled=3, info={"answer": "7"}),
        traj("none", n_sampled=3, info={}),  # no reference answer: that component fails
    ]
    scored, metrics = actor.score.choose(trajs).get()
    # 1.0 * 1 + 0.5 * (6 - 8) / 4 = 0.75 ; 0 + 0 ; answer failed -> length only = 0
    assert [t.reward for t in scored] == pytest.approx([0.75, 0.0, 0.0])
    assert "KeyError" in scored[2].info["reward_errors"]["answer"]
    assert metrics["reward/errors/answer"] == 1.0


def test_reward_actor_runs_an_agent_programs_reward(reward_procs):
    """The controller's rubric for `env.id=agent:...` in a real reward actor: the user's
    `reward(task, result, transcript)` runs there and its dict lands in the breakdown."""
    import functools

    from forge_agent.rewards.actor import RewardActor
    from forge_agent.rewards.build import AGENT_REWARD, build_rubric

    rubric = functools.partial(build_rubric, {}, 512, "tests.endpoint_agents:calculator_reward")
    actor = reward_procs.spawn("agent_reward", RewardActor, rubric)
    names = actor.setup.call().get()
    assert [v for _, v in names.items()] == [[AGENT_REWARD]] * 2
    task = {"task_id": "t", "prompt": "What is 3 * 4?", "answer": "12"}
    trajs = [
        traj("12", info={"task": task, "result": "12"}),
        traj("13", info={"task": task, "result": "The answer is 13."}),
        traj("", info={"task": task, "result": None}),
    ]
    scored, metrics = actor.score.choose(trajs, [AGENT_REWARD]).get()
    assert [t.reward for t in scored] == [1.0, 0.0, 0.0]
    assert scored[0].info["reward_breakdown"] == {f"{AGENT_REWARD}/correct": 1.0}
    assert metrics[f"reward/{AGENT_REWARD}/correct"] == pytest.approx(1 / 3)

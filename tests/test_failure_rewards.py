"""Failure rewards audited: failing, or leaving the task unfinished, never pays more than the
worst outcome an episode can play to (docs/rewards.md), for every shipped env; and eval counts
an infra episode at its env's failure reward."""

from __future__ import annotations

import asyncio
import json
from importlib.metadata import entry_points

import pytest

from forge_agent.env import EnvConfig, make_env
from forge_agent.env.pool import EnvPool
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks
from forge_agent.evaluation import evaluate
from forge_agent.types import Status
from tests.helpers import SaysPolicy


def _say(text: str) -> dict:
    return {"role": "assistant", "content": text}


def _act(action: str) -> dict:
    call = {"name": "act", "arguments": json.dumps({"action": action})}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "function": call}]}


async def _episode(env, task: dict, moves) -> float:
    """The reward of `moves` (assistant messages, the last repeated until the episode ends)."""
    await env.reset(task, 0)
    total = 0.0
    try:
        for i in range(50):
            result = await env.step(moves[min(i, len(moves) - 1)])
            total += sum(result.rewards.values())
            if result.done:
                return total
    finally:
        await env.close()
    raise AssertionError("the episode never ended")


def _task(env_id: str) -> dict:
    return load_tasks(ResolvedEnv.of(env_id), "train", 1, seed=0)[0]


# Each shipped env's worst outcome, reached by playing it: a wrong answer, a lost hand, ...
WORST_PLAY = {
    "calculator": [_say(r"\boxed{-1}")],
    "multihop": [_say("nobody")],
    "code_exec": [_say("```python\ndef f():\n    return None\n```")],
    "blackjack": [_act("hit")],  # hit until the hand is over: bust, a lost bet
    "frozen_lake": [_say("I stop here.")],  # answered before the game ended
    "reasoning_gym:basic_arithmetic": [_say("<answer>no</answer>")],
}
# Envs whose every outcome is a score in [0, 1] graded from files or a database (slow to play).
SCORED_FROM_ZERO = {"repo_tasks", "sql_mcp"}


def _shipped_env_ids() -> list[str]:
    return sorted(
        ep.name for ep in entry_points(group="forge_agent.envs") if ep.value.startswith("envs.")
    )


def test_every_shipped_env_has_its_worst_outcome_audited():
    assert set(_shipped_env_ids()) <= set(WORST_PLAY) | SCORED_FROM_ZERO


@pytest.mark.parametrize("env_id", sorted(WORST_PLAY))
def test_failing_never_pays_more_than_the_worst_played_outcome(env_id):
    """Before: blackjack failed at 0.0, a push, above the -1 of a lost hand."""
    env = make_env(env_id)
    worst = asyncio.run(_episode(env, _task(env_id), WORST_PLAY[env_id]))
    assert env.failure_reward <= worst, (env_id, env.failure_reward, worst)


@pytest.mark.parametrize("env_id", sorted(SCORED_FROM_ZERO))
def test_envs_scored_from_zero_fail_at_zero_or_below(env_id):
    from forge_agent.env.registry import env_spec, load_entry_point

    env_class = load_entry_point(env_spec(env_id).entry_point)
    assert env_class.failure_reward <= 0.0


def _engine(tokenizer, text: str, pool, max_turns: int = 1):
    from forge_agent.rollout import ChatRenderer, RolloutConfig, RolloutRunner

    config = RolloutConfig(max_turns=max_turns, max_total_tokens=2048)
    return RolloutRunner(SaysPolicy(tokenizer, text), pool, ChatRenderer(tokenizer), config)


def test_a_blackjack_hand_cut_by_max_turns_scores_a_lost_bet(tiny_tokenizer):
    """Before: the cut hand scored 0.0, a push, so leaving it unplayed beat losing it."""
    call = '<tool_call>\n{"name": "act", "arguments": {"action": "fold"}}\n</tool_call>'

    async def run():
        async with EnvPool(ResolvedEnv.of(EnvConfig("blackjack", {})), size=1) as pool:
            return await _engine(tiny_tokenizer, call, pool).run_episode(_task("blackjack"), 0)

    (traj,) = asyncio.run(run())
    assert traj.status is Status.TRUNCATED_TURNS
    assert traj.reward == -1.0


def test_an_infra_episode_counts_in_eval_at_its_envs_failure_reward(tiny_tokenizer):
    """Before: eval read `info["failure_reward"]`, never set on an infra episode, so a game
    whose server was down counted 0.0 instead of the -1 of a lost game."""

    async def run():
        config = EnvConfig("tests.rollout_envs:ServerDownEnv", {})
        async with EnvPool(ResolvedEnv.of(config), size=1) as pool:
            engine = _engine(tiny_tokenizer, "my move", pool)
            return await evaluate(engine, [{"task_id": "g0", "prompt": "play"}], k=2)

    report = asyncio.run(run())
    assert report.infra_failures == 2
    assert report.mean_reward == -1.0

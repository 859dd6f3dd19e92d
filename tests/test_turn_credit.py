"""Turn-level credit (`advantages.turn_credit`), hand-computed on small groups.

Every expected number below is worked out by hand in the comments from the formulas of
`forge_agent.algorithms.advantages`; the engine tests then check that a real env's per-turn
rewards and state keys reach the trajectory and that tokens of turn k get turn k's advantage.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from forge_agent.algorithms.advantages import AdvantageConfig, compute_advantages, turn_returns
from forge_agent.env import ToolEnv
from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutConfig, RolloutRunner
from forge_agent.types import Completion, Group, Status, Trajectory


def _traj(name: str, turn_rewards, reward, states=None, status=Status.OK) -> Trajectory:
    """A trajectory of len(turn_rewards) turns, each turn 2 sampled tokens after a 3-token
    prompt and before 1 env token."""
    t = Trajectory(task_id="t", group_id="g")
    t.token_ids, t.loss_mask = [0, 0, 0], [0, 0, 0]
    for _ in turn_rewards:
        start = len(t.token_ids)
        t.token_ids += [1, 1, 2]
        t.loss_mask += [1, 1, 0]
        t.turn_spans.append((start, start + 2))
    t.turn_rewards = list(turn_rewards)
    t.turn_states = list(states) if states is not None else [None] * len(turn_rewards)
    t.reward, t.status, t.info["name"] = float(reward), status, name
    return t


def _by_name(kept):
    return {t.info["name"]: t for t in kept}


def test_turn_returns_discount_and_put_the_reward_actors_part_on_the_last_turn() -> None:
    # per-turn env rewards [1, 0, 2] and nothing else: G = [1 + .5 * (0 + .5 * 2), 0 + .5 * 2, 2]
    assert turn_returns(_traj("a", [1, 0, 2], 3), gamma=0.5) == [1.5, 1.0, 2.0]
    # no env rewards, a reward actor's 1.0 at the end: r = [0, 1]
    assert turn_returns(_traj("b", [0, 0], 1), gamma=0.5) == [0.5, 1.0]
    assert turn_returns(_traj("c", [], 0)) == []


def test_discounted_normalises_every_turn_return_by_the_groups_baseline() -> None:
    a, b, c = _traj("a", [1, 0, 2], 3), _traj("b", [0, 0], 1), _traj("c", [0], 0)
    cfg = AdvantageConfig(turn_credit="discounted", gamma=0.5, eps=0.0)
    kept, _ = compute_advantages([Group("t", [a, b, c])], cfg)
    # G: a [1.5, 1, 2], b [.5, 1], c [0]; starts [1.5, .5, 0]: mean 2/3,
    # sample std sqrt(((5/6)^2 + (1/6)^2 + (2/3)^2) / 2) = sqrt(7/12)
    mean, std = 2 / 3, math.sqrt(7 / 12)
    got = _by_name(kept)
    assert got["a"].turn_advantages == pytest.approx([(x - mean) / std for x in (1.5, 1, 2)])
    assert got["b"].turn_advantages == pytest.approx([(x - mean) / std for x in (0.5, 1)])
    assert got["c"].turn_advantages == pytest.approx([(0 - mean) / std])
    assert got["a"].advantage == pytest.approx((1.5 - mean) / std)  # the first turn's


def test_discounted_with_rloo_uses_the_leave_one_out_baseline() -> None:
    a, b, c = _traj("a", [0, 0], 2), _traj("b", [1], 1), _traj("c", [0, 0, 0], 0)
    cfg = AdvantageConfig(turn_credit="discounted", gamma=0.5, estimator="rloo")
    kept, _ = compute_advantages([Group("t", [a, b, c])], cfg)
    # G: a [1, 2], b [1], c [0, 0, 0]; starts [1, 1, 0]; baselines a: (1+0)/2, b: (1+0)/2, c: 1
    got = _by_name(kept)
    assert got["a"].turn_advantages == pytest.approx([0.5, 1.5])
    assert got["b"].turn_advantages == pytest.approx([0.5])
    assert got["c"].turn_advantages == pytest.approx([-1.0, -1.0, -1.0])


def test_discounted_with_gamma_one_and_an_end_reward_is_per_episode_credit() -> None:
    def group():
        return [_traj("a", [0, 0, 0], 1), _traj("b", [0], 0), _traj("c", [0, 0], 1)]

    episode, _ = compute_advantages([Group("t", group())], AdvantageConfig())
    turned, _ = compute_advantages([Group("t", group())], AdvantageConfig(turn_credit="discounted"))
    for e, t in zip(episode, turned, strict=True):
        assert e.turn_advantages == []
        assert t.turn_advantages == pytest.approx([e.advantage] * len(t.turn_spans))
        assert t.token_advantages() == pytest.approx(e.token_advantages())


def test_gigpo_adds_step_group_advantages_of_turns_from_the_same_state() -> None:
    start = "<start>"
    members = [
        _traj("a", [0, 0, 0], 1, [start, "s1", "s2"]),
        _traj("b", [0, 0], 0, [start, "s1"]),
        _traj("c", [0, 0], 1, [start, "s3"]),
        _traj("d", [0, 0, 0], 0, [start, "s1", "s2"]),
    ]
    cfg = AdvantageConfig(turn_credit="gigpo", estimator="dr_grpo", gamma=1.0, omega=1.0)
    kept, _ = compute_advantages([Group("t", members)], cfg)
    # episode (dr_grpo, rewards [1, 0, 1, 0]): [.5, -.5, .5, -.5]
    # step groups (returns = episode rewards, gamma 1):
    #   <start>: a b c d -> [1, 0, 1, 0] - .5 = [.5, -.5, .5, -.5]
    #   s1: a1 b1 d1 -> [1, 0, 0] - 1/3 = [2/3, -1/3, -1/3]
    #   s2: a2 d2 -> [1, 0] - .5 = [.5, -.5];  s3: c1 alone -> 0
    got = _by_name(kept)
    assert got["a"].turn_advantages == pytest.approx([1.0, 0.5 + 2 / 3, 1.0])
    assert got["b"].turn_advantages == pytest.approx([-1.0, -0.5 - 1 / 3])
    assert got["c"].turn_advantages == pytest.approx([1.0, 0.5])
    assert got["d"].turn_advantages == pytest.approx([-1.0, -0.5 - 1 / 3, -1.0])
    assert got["a"].advantage == pytest.approx(0.5)  # the episode-level part


def test_gigpo_omega_weights_the_step_part_and_unkeyed_states_get_none() -> None:
    members = [_traj("a", [0, 0], 1, [None, None]), _traj("b", [0, 0], 0, [None, None])]
    cfg = AdvantageConfig(turn_credit="gigpo", estimator="dr_grpo", omega=0.25)
    kept, _ = compute_advantages([Group("t", members)], cfg)
    got = _by_name(kept)
    assert got["a"].turn_advantages == pytest.approx([0.5, 0.5])  # episode part only
    assert got["b"].turn_advantages == pytest.approx([-0.5, -0.5])
    keyed = [_traj("a", [0], 1, ["x"]), _traj("b", [0], 0, ["x"])]
    kept, _ = compute_advantages([Group("t", keyed)], cfg)
    # episode [.5, -.5] + .25 * step [.5, -.5]
    assert [t.turn_advantages[0] for t in kept] == pytest.approx([0.625, -0.625])


def test_failed_and_masked_truncated_members_get_no_turn_advantages_and_leave_the_groups() -> None:
    start = "<start>"
    members = [
        _traj("ok1", [0, 0], 1, [start, "s"]),
        _traj("ok0", [0, 0], 0, [start, "s"]),
        _traj("failed", [0, 0], 0, [start, "s"], status=Status.ENV_ERROR),
        _traj("cut", [0, 0], 0, [start, "s"], status=Status.TRUNCATED_TURNS),
    ]
    cfg = AdvantageConfig(turn_credit="gigpo", estimator="dr_grpo", truncated="mask")
    kept, stats = compute_advantages([Group("t", members)], cfg)
    # baseline: ok1, ok0, cut (rewards [1, 0, 0], mean 1/3); the env_error member is out of
    # every group. <start> and s: returns [1, 0, 0] -> [2/3, -1/3, -1/3].
    got = _by_name(kept)
    assert set(got) == {"ok1", "ok0"}
    assert got["ok1"].turn_advantages == pytest.approx([4 / 3, 4 / 3])
    assert got["ok0"].turn_advantages == pytest.approx([-2 / 3, -2 / 3])
    assert members[3].turn_advantages == [] and members[3].advantage == 0.0
    assert members[2].turn_advantages == []
    assert stats.dropped["infra_failure"] == 1 and stats.dropped["truncated"] == 1


def test_tokens_of_turn_k_get_turn_ks_advantage() -> None:
    t = _traj("a", [0, 0], 1)
    t.advantage, t.turn_advantages = 9.0, [1.0, -2.0]
    # prompt 3 tokens, turn 0 at 3..5, env token 5, turn 1 at 6..8, env token 8
    assert t.token_advantages() == [9, 9, 9, 1, 1, 9, -2, -2, 9]


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [("turn_credit", "per_turn", "none"), ("gamma", 0.0, "(0, 1]"), ("omega", -1.0, ">= 0")],
)
def test_bad_credit_settings_name_the_key(key, value, allowed) -> None:
    from forge_agent.typed_config import ConfigError, from_dict

    with pytest.raises(ConfigError) as err:
        from_dict(AdvantageConfig, {key: value})
    assert key in str(err.value) and allowed in str(err.value)


# ------------------------------------------------------------------------ through the engine
def climb() -> str:
    """Climb one stair."""
    return "up"


class StairsEnv(ToolEnv):
    """Climb stairs with `climb`: each climb pays 0.25 at once; answering pays 1 per stair
    climbed at the end. `state_key` is the stair the episode stands on (`ToolEnv` reports it)."""

    tools = (climb,)

    def reset(self, task, seed=None):
        self.stair = 0
        return super().reset(task, seed)

    async def step(self, message):
        result = await super().step(message)
        if message.get("tool_calls"):
            self.stair += 1
            result.rewards = {"climb": 0.25}
            result.info["state_key"] = self.state_key()  # after the climb
        return result

    def state_key(self) -> str:
        return f"stair-{self.stair}"

    def judge(self, answer: str):
        return {"height": float(self.stair)}


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def test_the_engine_keeps_rewards_and_states_per_turn(renderer) -> None:
    climb = '<tool_call>\n{"name": "climb", "arguments": {}}\n</tool_call>'
    texts = [climb, climb, "done"]

    async def generate(prompt_ids, sampling, session):
        ids = renderer.tokenizer.encode(texts.pop(0) + "<|im_end|>", add_special_tokens=False)
        return Completion(ids, [0.0] * len(ids), "stop", 0)

    engine = RolloutRunner(generate, LocalEnvs(StairsEnv), renderer, RolloutConfig(max_turns=4))
    (traj,) = asyncio.run(engine.run_episode({"task_id": "t", "prompt": "climb"}, seed=0))
    assert traj.status == Status.OK, traj.info
    assert len(traj.turn_spans) == 3
    assert traj.turn_rewards == [0.25, 0.25, 2.0]
    assert traj.turn_states == ["<start>", "stair-1", "stair-2"]
    assert traj.reward == pytest.approx(2.5)
    assert turn_returns(traj, gamma=0.5) == pytest.approx([0.25 + 0.5 * 1.25, 0.25 + 1.0, 2.0])
    assert "state_key" not in traj.info

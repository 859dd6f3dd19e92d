"""A warm start's demonstrations are rendered once, append-only, and cut to the run's episode
limits: what c257d3d rendered turn by turn after the whole conversation so far (quadratic in
a game's turns: CliffWalking 0.61 s a demonstration, ~7,000 tokens, longer than an episode)."""

from __future__ import annotations

import pytest

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.run.config import load_config
from forge_agent.warm_start.config import DemoCap, WarmStartConfig
from forge_agent.warm_start.demos import TurnWriter, demo_trajectory, demonstrations

CLIFF = "gymnasium:CliffWalking-v1"


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def _same_tokens(a, b) -> None:
    assert a.token_ids == b.token_ids
    assert a.loss_mask == b.loss_mask
    assert a.segment_starts == b.segment_starts
    assert a.turn_spans == b.turn_spans


def test_the_default_runs_demonstrations_have_the_tokens_of_whole_renders(renderer):
    """The default run's cached warm start stays valid: its demonstrations, rendered once and
    cut to the default run's limits, are token for token those rendered whole, uncut."""
    cfg = load_config(None, [])
    env = ResolvedEnv.of(cfg.env)
    convos, tools = demonstrations(env, 24, cfg.warm_start.demo_fraction, cfg.warm_start.seed)
    writer, cap = TurnWriter.shared(renderer), DemoCap.of(cfg.rollout)
    assert sum(len([m for m in c if m["role"] == "assistant"]) > 1 for c in convos) >= 4
    for k, convo in enumerate(convos):
        once = demo_trajectory(renderer, convo, tools, f"d{k}", cap, writer=writer)
        whole = demo_trajectory(renderer, convo, tools, f"d{k}", whole=True)
        _same_tokens(once, whole)
        assert "demo_cut" not in once.info and once.messages == convo


@pytest.mark.parametrize(
    ("env_id", "kwargs", "n"),
    [("multihop", {}, 6), ("code_exec", {}, 6), (CLIFF, {"max_moves": 30}, 2)],
)
def test_rendered_once_or_whole_a_demonstration_has_the_same_tokens(renderer, env_id, kwargs, n):
    convos, tools = demonstrations(ResolvedEnv.of(env_id, kwargs=kwargs), n, 0.5, 0)
    writer = TurnWriter.shared(renderer)
    for k, convo in enumerate(convos):
        once = demo_trajectory(renderer, convo, tools, f"d{k}", writer=writer)
        _same_tokens(once, demo_trajectory(renderer, convo, tools, f"d{k}", whole=True))


def test_a_demonstration_renders_no_growing_conversation(renderer, monkeypatch):
    """Every render a whole game's demonstration makes is of its opening and one turn at
    most: its cost grows with its turns, not with their square."""
    convos, tools = demonstrations(ResolvedEnv.of(CLIFF), 1, 0.5, 0)
    (convo,) = convos
    opening = next(k for k, m in enumerate(convo) if m["role"] == "assistant")
    rendered: list[int] = []
    for name in ("render_prompt", "render_full"):
        real = getattr(ChatRenderer, name)

        def counted(self, messages, tools, _real=real):
            rendered.append(len(messages))
            return _real(self, messages, tools)

        monkeypatch.setattr(ChatRenderer, name, counted)
    demo = demo_trajectory(renderer, convo, tools, "cliff")
    assert len(demo.turn_spans) >= 10  # a whole game: many turns
    assert max(rendered) <= max(opening, len(TurnWriter(renderer).context) + 1)


def test_a_gymnasium_demonstration_is_cut_to_the_runs_episode_limits(renderer):
    convos, tools = demonstrations(ResolvedEnv.of(CLIFF), 2, 0.5, 0)
    rollout = RolloutConfig(max_turns=4, max_total_tokens=512, tool_output_tokens=64)
    for k, convo in enumerate(convos):
        demo = demo_trajectory(renderer, convo, tools, f"d{k}", DemoCap.of(rollout))
        assert 1 <= len(demo.turn_spans) <= 4
        assert len(demo.token_ids) <= 512
        assert demo.loss_mask[-1] == 1  # it ends with the policy's turn, not a reply
        assert "rollout.max_total_tokens=512" in demo.info["demo_cut"]
        assert "rollout.tool_output_tokens=64" in demo.info["demo_cut"]  # the map is cut
        assert demo.messages[-1]["role"] == "assistant"
    turns_only = DemoCap(max_turns=2)
    demo = demo_trajectory(renderer, convos[0], tools, "d0", turns_only)
    assert len(demo.turn_spans) == 2 and demo.info["demo_cut"] == "rollout.max_turns=2"
    whole = demo_trajectory(renderer, convos[0], tools, "d0")
    assert demo.token_ids == whole.token_ids[: len(demo.token_ids)]  # its first two turns


def test_a_game_asked_for_few_turns_plays_the_first_moves_of_the_whole_game():
    env = ResolvedEnv.of("gymnasium:Taxi-v4")
    whole, _ = demonstrations(env, 3, 0.5, 0)
    short, _ = demonstrations(env, 3, 0.5, 0, max_turns=5)
    for full, first in zip(whole, short, strict=True):
        assert len([m for m in first if m["role"] == "assistant"]) == 5
        assert first == full[: len(first)]


def test_a_gymnasium_warm_start_builds_cut_demonstrations_and_says_so(renderer, capsys):
    from forge_agent.warm_start.sft import demonstration_trajectories

    cfg = WarmStartConfig(steps=2, batch_size=4)
    cap = DemoCap.of(RolloutConfig())
    demos = demonstration_trajectories(renderer, [ResolvedEnv.of(CLIFF)], cfg, cap)
    assert len(demos) == 8 and all(len(d.token_ids) <= 512 for d in demos)
    out = capsys.readouterr().out
    assert "[warm start] 8 of 8 demonstrations cut to the run's episode limits (" in out
    assert "rollout.max_total_tokens=512" in out
    assert "renders whole" not in out and "rendering each of its" not in out

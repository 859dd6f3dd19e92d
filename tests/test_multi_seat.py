"""Multi-seat episodes: one trajectory per policy seat with its own tokens, per-seat baselines,
players (scripted, endpoint, snapshot) and bad input; TextArena games through the adapter.

The episodes here run on the real tiny tokenizer and renderer with a deterministic in-process
generate function (its logprobs are known, so the bookkeeping can be checked exactly); the
real engine trains on seats in tests/test_multi_seat_train.py."""

from __future__ import annotations

import asyncio
import itertools
import random
import re

import pytest

from forge_agent.algorithms.advantages import AdvantageConfig, compute_advantages
from forge_agent.env.adapters.textarena import (
    TextArenaEnv,
    legal_moves,
    random_move,
    tictactoe_board,
    tictactoe_heuristic,
    tictactoe_mixed,
)
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import EnvSetupError
from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutConfig, RolloutRunner
from forge_agent.rollout.players import EndpointPlayer, ScriptedPlayer, check_seats
from forge_agent.types import Completion, Group, Status, Trajectory
from tests.seat_envs import CountingGame, broken_player, say_seven


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def _generate(tokenizer, renderer, seed: int = 0):
    """A legal move of the last board (tic-tac-toe's listed moves, one object off Nim's first
    non-empty pile, else "3") as tokens, each token's logprob -0.25."""
    rng = random.Random(seed)

    async def generate(ids, sampling, session):
        text = tokenizer.decode(ids)
        moves = legal_moves(text)
        piles = [(p, n) for p, n in re.findall(r"pile (\d+): (\d+)", text)[-3:] if n != "0"]
        if piles:
            moves = [f"[{piles[0][0]} 1]"]
        text = rng.choice(moves) if moves else "3"
        out = [*tokenizer.encode(text, add_special_tokens=False), renderer.stop_token_ids[0]]
        return Completion(out, [-0.25] * len(out), "stop", 7)

    return generate


def _engine(tokenizer, renderer, factory, players, **config):
    cfg = RolloutConfig(max_turns=6, max_total_tokens=4096, tool_output_tokens=1024, **config)
    gen = _generate(tokenizer, renderer)
    return RolloutRunner(gen, LocalEnvs(factory), renderer, cfg, players=players)


def _check_tokens(traj: Trajectory, renderer) -> None:
    """Every sampled token is masked in with the sampler's logprob and version; every other
    token (prompt, the other seat's moves, env text) is masked out."""
    n = len(traj.token_ids)
    assert len(traj.loss_mask) == len(traj.logprobs) == len(traj.versions) == n
    sampled = {i for s, e in traj.turn_spans for i in range(s, e)}
    assert {i for i, m in enumerate(traj.loss_mask) if m} == sampled
    for i in range(n):
        assert (traj.logprobs[i], traj.versions[i]) == ((-0.25, 7) if i in sampled else (0.0, -1))
    assert traj.segment_starts == [0]  # every later prompt was bridged append-only


def test_a_two_seat_episode_yields_a_trajectory_per_seat_with_its_own_tokens(
    tiny_tokenizer, renderer
):
    players = {"player_0": None, "player_1": None}
    engine = _engine(tiny_tokenizer, renderer, CountingGame, players)
    group = asyncio.run(engine.run_group({"task_id": "count"}, 0, 1))
    first, second = group.trajectories
    assert (first.info["seat"], second.info["seat"]) == ("player_0", "player_1")
    assert first.info["episode_id"] == second.info["episode_id"]
    assert first.status == second.status == Status.OK
    assert len(first.turn_spans) == len(second.turn_spans) == 2
    for traj in (first, second):
        _check_tokens(traj, renderer)
    text0, text1 = (tiny_tokenizer.decode(t.token_ids) for t in (first, second))
    assert "You are player_0." in text0 and "You are player_1." not in text0
    assert "You are player_1." in text1 and "player_0 said 3." in text1
    assert "player_1 said 3." in text0  # the other seat's move, as the env told it
    # zero-sum: the first mover wins, the reward sits on each seat's last turn
    assert (first.reward, second.reward) == (1.0, -1.0)
    assert first.turn_rewards == [0.0, 1.0] and second.turn_rewards == [0.0, -1.0]
    assert first.info["seat_rewards"] == {"player_0": 1.0, "player_1": -1.0}
    assert "zero_sum_error" not in first.info


def test_with_route_seat_each_policy_seat_samples_and_trains_its_own_adapter(
    tiny_tokenizer, renderer
):
    """`trainer.lora.route=seat`: one LoRA adapter per player, named after its seat; every
    request of a seat names that adapter and its trajectory carries it (the trainer trains
    each adapter on its own seat's trajectories, tests/test_lora_adapters.py)."""
    asked = []
    inner = _generate(tiny_tokenizer, renderer)

    async def generate(ids, sampling, session):
        asked.append((session.rsplit("-", 1)[-1], sampling.adapter))
        return await inner(ids, sampling, session)

    cfg = RolloutConfig(max_turns=6, max_total_tokens=4096, tool_output_tokens=1024)
    players = {"player_0": None, "player_1": None}
    engine = RolloutRunner(
        generate, LocalEnvs(CountingGame), renderer, cfg, players=players, adapter_field="seat"
    )
    group = asyncio.run(engine.run_group({"task_id": "count"}, 0, 1))
    assert [(t.info["seat"], t.adapter) for t in group.trajectories] == [
        ("player_0", "player_0"),
        ("player_1", "player_1"),
    ]
    assert asked and all(seat == adapter for seat, adapter in asked)
    assert {seat for seat, _ in asked} == {"player_0", "player_1"}


def test_each_seat_is_normalised_among_its_own_trajectories() -> None:
    def traj(seat: str, reward: float) -> Trajectory:
        t = Trajectory(task_id="t", group_id="g", reward=reward, info={"seat": seat})
        t.loss_mask = [1]
        return t

    # player_0 wins every game (a first-mover advantage): its seat has no signal, and its
    # +1s must not lift player_1's baseline
    members = [traj("player_0", 1.0) for _ in range(2)]
    members += [traj("player_1", r) for r in (-1.0, 0.0)]
    kept, stats = compute_advantages([Group("t", members)])
    assert stats.dropped["zero_variance"] == 2 and stats.groups_in == 2
    assert [t.info["seat"] for t in kept] == ["player_1", "player_1"]
    assert kept[0].advantage < 0 < kept[1].advantage
    assert abs(kept[0].advantage + kept[1].advantage) < 1e-9  # its own mean is the baseline


def test_a_scripted_opponent_plays_its_seat_and_only_the_policy_seat_is_trained(
    tiny_tokenizer, renderer
):
    players = {"player_0": None, "player_1": ScriptedPlayer(say_seven, "player_1")}
    engine = _engine(tiny_tokenizer, renderer, CountingGame, players)
    group = asyncio.run(engine.run_group({"task_id": "count"}, 0, 3))
    assert len(group.trajectories) == 3
    assert {t.info["seat"] for t in group.trajectories} == {"player_0"}
    traj = group.trajectories[0]
    assert traj.info["players"] == {"player_0": "policy", "player_1": "say_seven"}
    assert "player_1 said 7." in tiny_tokenizer.decode(traj.token_ids)
    _check_tokens(traj, renderer)


def _stalling(tokenizer, renderer, staller: str):
    """`_generate`, except that `staller`'s seat writes garbage until the turn's token cap."""
    inner = _generate(tokenizer, renderer)

    async def generate(ids, sampling, session):
        if session.endswith(staller):
            out = tokenizer.encode("[[[4]4]4", add_special_tokens=False)
            return Completion(out, [-0.25] * len(out), "length", 7)
        return await inner(ids, sampling, session)

    return generate


def _self_play(tokenizer, renderer, cfg, staller: str) -> list[Trajectory]:
    """One self-play game of CountingGame that player_1 wins if it plays to the end."""
    players = {"player_0": None, "player_1": None}
    generate = _stalling(tokenizer, renderer, staller)
    engine = RolloutRunner(generate, LocalEnvs(CountingGame), renderer, cfg, players=players)
    task = {"task_id": "count", "winner": "player_1"}
    return asyncio.run(engine.run_group(task, 0, 1)).trajectories


@pytest.mark.parametrize(("forfeit", "forfeit_reward"), [(False, None), (True, None), (True, -1.0)])
def test_a_seat_cut_at_its_token_cap_forfeits_the_game_and_is_trained_against(
    tiny_tokenizer, renderer, forfeit, forfeit_reward
):
    """player_1 writes garbage to its token cap. With `rollout.forfeit: false` the cut game
    is truncated, scored 0 and masked (`advantages.truncated: mask`): an escape the policy is
    never trained against. By default the staller loses by forfeit (scoring
    `rollout.forfeit_reward`, else the env's `failure_reward`), the other seat wins
    (zero-sum), and both are trained on: the forfeit's advantage is below a played game's."""
    cfg = RolloutConfig(
        max_turns=6, max_total_tokens=4096, forfeit=forfeit, forfeit_reward=forfeit_reward
    )
    first, second = _self_play(tiny_tokenizer, renderer, cfg, staller="player_1")
    played = _self_play(tiny_tokenizer, renderer, cfg, staller="nobody")
    assert [t.reward for t in played] == [-1.0, 1.0]
    kept, stats = compute_advantages(
        [Group("count", [first, second, *played])], AdvantageConfig(truncated="mask")
    )
    if not forfeit:
        assert (first.status, second.status) == (Status.TRUNCATED_TURNS, Status.TRUNCATED_LENGTH)
        assert first.reward == second.reward == 0.0
        assert stats.dropped["truncated"] == 2 and second not in kept
        return
    assert (first.status, second.status) == (Status.OK, Status.FORFEIT)
    assert (first.reward, second.reward) == (1.0, -1.0)
    assert first.turn_rewards == [1.0] and second.turn_rewards == [-1.0]
    assert second.info["seat_rewards"] == {"player_0": 1.0, "player_1": -1.0}
    assert second.info["forfeit"] == {"seat": "player_1", "cut": "truncated_length"}
    assert "zero_sum_error" not in second.info
    assert "truncated" not in stats.dropped and second in kept and first in kept
    assert second.advantage < 0 < first.advantage
    assert sum(second.loss_mask) == second.turn_spans[0][1] - second.turn_spans[0][0] > 0


def test_a_seat_with_its_turns_spent_forfeits_when_forfeit_reward_is_set(tiny_tokenizer, renderer):
    """A seat to move after `max_turns` moves (e.g. stalling with invalid moves) loses too."""
    cfg = RolloutConfig(max_turns=1, max_total_tokens=4096, forfeit_reward=-1.0)
    first, second = _self_play(tiny_tokenizer, renderer, cfg, staller="nobody")
    assert (first.status, second.status) == (Status.FORFEIT, Status.OK)  # player_0 moves next
    assert (first.reward, second.reward) == (-1.0, 1.0)
    assert first.info["forfeit"] == {"seat": "player_0", "cut": "truncated_turns"}


def test_tictactoe_and_nim_run_through_the_textarena_adapter(tiny_tokenizer, renderer):
    for game in ("TicTacToe-v0", "Nim-v0"):
        players = {"player_0": None, "player_1": None}
        engine = _engine(tiny_tokenizer, renderer, lambda g=game: TextArenaEnv(g), players)
        group = asyncio.run(engine.run_group({"task_id": game, "seed": 3}, 3, 2))
        assert len(group.trajectories) == 4
        for traj in group.trajectories:
            assert traj.status == Status.OK, (game, traj.info)
            assert traj.info["outcome"]
            _check_tokens(traj, renderer)
        for i in (0, 2):  # TextArena's two-player games are zero-sum
            pair = group.trajectories[i : i + 2]
            assert sum(t.reward for t in pair) == 0.0 and "zero_sum_error" not in pair[0].info
    text = tiny_tokenizer.decode(group.trajectories[1].token_ids)
    assert "Nim" in text and "[Player 0]" in text  # player_1 read player_0's move


def test_the_textarena_demonstrations_are_legal_games_of_one_seat() -> None:
    demos = TextArenaEnv("TicTacToe-v0").demonstrations(6, seed=0, demo_fraction=1.0)
    assert len(demos) == 6
    for demo in demos:
        assert demo[0]["role"] == "system" and demo[-1]["role"] == "assistant"
        for before, move in itertools.pairwise(demo):
            if move["role"] == "assistant":
                assert move["content"] in legal_moves(before["content"])
    board = tictactoe_board(" O | X | 2 \n---+---+---\n 3 | 4 | 5 \n---\n 6 | 7 | X ")
    assert board == ["O", "X", "", "", "", "", "", "", "X"]


def test_connect_four_has_legal_moves_and_stacking_demonstrations() -> None:
    """Before: Connect Four lists no `Available Moves`, so it had no demonstrations (the warm
    start was skipped) and its random opponent could only answer "[0]"."""
    env = TextArenaEnv("ConnectFour-v0", board_only=True, demo_player="stack")
    start = env._reset({"seed": 0})
    assert legal_moves(start.seats["player_0"][0][-1]["content"]) == [f"[{c}]" for c in range(7)]
    for _ in range(6):  # column 2 filled to the top: no longer a legal move
        step = env._step({"role": "assistant", "content": "[2]"})
    seen = next(iter(step.messages.values()))[0]["content"]
    assert "[2]" not in legal_moves(seen) and len(legal_moves(seen)) == 6
    demos = env.demonstrations(8, seed=0, demo_fraction=1.0)
    assert len(demos) == 8
    for demo in demos:
        moves = [m["content"] for m in demo if m["role"] == "assistant"]
        for before, move in itertools.pairwise(demo):
            if move["role"] == "assistant":
                assert move["content"] in legal_moves(before["content"])
        assert len(set(moves)) < len(moves)  # it keeps dropping into its column
    with pytest.raises(EnvSetupError, match="demo_player"):
        TextArenaEnv("ConnectFour-v0", demo_player="greedy")


def test_the_tictactoe_cells_view_names_the_same_board_and_the_scripted_players_read_it() -> None:
    env = TextArenaEnv("TicTacToe-v0", cells=True)
    start = env._reset({"seed": 0})
    assert start.seats["player_0"][0][-1]["content"] == "You are O. Board: 0 1 2 / 3 4 5 / 6 7 8."
    for move in ("[4]", "[0]", "[8]"):
        step = env._step({"role": "assistant", "content": move})
    seen = step.messages["player_1"][0]["content"]  # X's view after O 4, X 0, O 8
    assert seen == "You are X. Board: X 1 2 / 3 O 5 / 6 7 O."
    assert tictactoe_board(seen) == ["X", "", "", "", "O", "", "", "", "O"]
    assert legal_moves(seen) == ["[1]", "[2]", "[3]", "[5]", "[6]", "[7]"]
    x_sees = [
        {"role": "system", "content": env.system_prompt("player_1")},
        step.messages["player_1"][0],
    ]
    assert tictactoe_heuristic(x_sees, []) in {"[2]", "[6]"}  # no line to take or block: a corner
    x_sees[-1] = {"role": "user", "content": "You are X. Board: X 1 2 / 3 O O / 6 7 8."}
    assert tictactoe_heuristic(x_sees, []) == "[3]"  # the block
    o_sees = [
        {"role": "system", "content": env.system_prompt("player_0")},
        {"role": "user", "content": "You are O. Board: O X 2 / X O 5 / 6 7 8."},
    ]
    assert tictactoe_heuristic(o_sees, []) == "[8]"  # the win
    assert random_move(o_sees, []) in {"[2]", "[5]", "[6]", "[7]", "[8]"}
    for demo in env.demonstrations(4, seed=0, demo_fraction=1.0):
        for before, move in itertools.pairwise(demo):
            if move["role"] == "assistant":
                assert "Board: " in before["content"] and "|" not in before["content"]
                assert move["content"] in legal_moves(before["content"])
    with pytest.raises(EnvSetupError, match=r"env\.kwargs\.cells"):
        TextArenaEnv("Nim-v0", cells=True)


def test_the_mixed_tictactoe_player_blocks_about_half_the_lines_it_sees() -> None:
    # X to move; O threatens 0-1-2: the heuristic always blocks at 2, random_move 1 in 6
    seen = [{"role": "user", "content": "You are X. Board: O O 2 / 3 X 5 / 6 7 8."}]
    random.seed(0)
    moves = [tictactoe_mixed(seen, []) for _ in range(400)]
    assert set(moves) <= {"[2]", "[3]", "[5]", "[6]", "[7]", "[8]"}
    assert 0.5 < moves.count("[2]") / len(moves) < 0.65  # 1/2 + 1/2 * 1/6 = 0.58


def test_a_turn_given_to_a_seat_that_does_not_exist_ends_the_episode_env_error(
    tiny_tokenizer, renderer
):
    players = {"player_0": None, "player_1": None}
    engine = _engine(tiny_tokenizer, renderer, lambda: CountingGame(rogue_turn="player_9"), players)
    group = asyncio.run(engine.run_group({"task_id": "count"}, 0, 1))
    assert [t.status for t in group.trajectories] == [Status.ENV_ERROR] * 2
    assert "player_9" in group.trajectories[0].info["error"]


def test_an_opponent_endpoint_that_does_not_answer_leaves_the_baselines(tiny_tokenizer, renderer):
    dead = EndpointPlayer("http://127.0.0.1:9/v1", seat="player_1", timeout_s=2.0)
    broken = ScriptedPlayer(broken_player, "player_1")
    for opponent, words in ((dead, "did not answer"), (broken, "scripted player is broken")):
        players = {"player_0": None, "player_1": opponent}
        engine = _engine(tiny_tokenizer, renderer, CountingGame, players)
        group = asyncio.run(engine.run_group({"task_id": "count"}, 0, 2))
        assert [t.status for t in group.trajectories] == [Status.ENV_ERROR] * 2
        assert words in group.trajectories[0].info["error"]
        kept, stats = compute_advantages([group])
        assert kept == [] and stats.dropped["infra_failure"] == 2


def test_a_seated_env_without_seat_players_and_bad_seat_configs_are_refused() -> None:
    seats = ("player_0", "player_1")
    with pytest.raises(ValueError, match=r"no player assigned to seat\(s\) \['player_1'\]"):
        check_seats({"player_0": "policy"}, seats, "textarena:TicTacToe-v0")
    with pytest.raises(ValueError, match="older than the weight store keeps"):
        check_seats({"player_0": "policy", "player_1": "snapshot:-5"}, seats, "g", 2)
    with pytest.raises(ValueError, match=r"names \['player_2'\]"):
        check_seats({"player_0": "policy", "player_1": "policy", "player_2": "policy"}, seats, "g")
    with pytest.raises(ValueError, match="no seat of env 'g' is played by the policy"):
        check_seats({"player_0": "tests.seat_envs:say_seven", "player_1": "league:2"}, seats, "g")
    with pytest.raises(ValueError, match="declares no seats"):
        check_seats({"player_0": "policy"}, (), "calculator")
    specs = check_seats({"player_0": "policy", "player_1": "snapshot:-1"}, seats, "g", 2)
    assert (specs["player_1"].kind, specs["player_1"].arg) == ("snapshot", 1)


def test_the_run_config_refuses_a_seated_env_without_env_seats() -> None:
    from forge_agent.env.sources import EnvSetupError
    from forge_agent.run.config import load_config
    from forge_agent.run.setup_checks import check_env_seats

    cfg = load_config(None, ["env.id=textarena:TicTacToe-v0", "env.kwargs={}"])
    with pytest.raises(EnvSetupError, match="say who plays each"):
        check_env_seats(ResolvedEnv.of(cfg.env), cfg.weight_store.max_versions)
    cfg = load_config(None, ["env.id=calculator"])
    assert (
        check_env_seats(ResolvedEnv.of(cfg.env), cfg.weight_store.max_versions) == {}
    )  # a one-seat env runs as before


def test_the_trace_page_shows_the_seats_of_an_episode_side_by_side(tiny_tokenizer, renderer):
    from forge_agent.observability.trace_html import render_html

    players = {"player_0": None, "player_1": None}
    engine = _engine(tiny_tokenizer, renderer, CountingGame, players)
    group = asyncio.run(engine.run_group({"task_id": "count"}, 0, 2))
    page = render_html(group.trajectories)
    assert page.count('<div class="seats">') == 2  # one row per episode
    row = page.split('<div class="seats">')[1]
    assert row.index("seat player_0") < row.index("seat player_1")


def test_the_docs_seated_env_plays_through_the_engine(tiny_tokenizer, renderer):
    from pathlib import Path

    from tests.user_envs import docs_blocks

    page = Path(__file__).resolve().parents[1] / "docs" / "multi_agent.md"
    (code,) = [text for lang, text in docs_blocks(page) if lang == "python"]
    namespace: dict = {}
    exec(compile(code, "docs/multi_agent.md", "exec"), namespace)
    players = {"left": None, "right": ScriptedPlayer(say_seven, "right")}
    engine = _engine(tiny_tokenizer, renderer, namespace["LongerWord"], players)
    (traj,) = asyncio.run(engine.run_group({"task_id": "words"}, 0, 1)).trajectories
    assert traj.status == Status.OK and traj.info["seat"] == "left"
    # "3" against "7": words of one letter tie
    assert traj.reward == 0.0 and traj.info["seat_rewards"] == {"left": 0.0, "right": 0.0}
    assert traj.info["outcome"] == "difference 0"

"""Gymnasium both ways: FrozenLake/Blackjack as agent envs, agent envs as gymnasium.Env."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from envs.calculator import generate_tasks
from envs.frozen_lake import DEFAULT_MAP, FrozenLakeEnv, shortest_path
from forge_agent.env import EnvConfig, EnvPool, make_env
from forge_agent.env.adapters.agent_gym import parse_text_action, register_gymnasium_envs
from forge_agent.env.adapters.gymnasium import ACTION_NAMES
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.types import StepResult

pytestmark = pytest.mark.timeout(120)


def act_calls(actions: list[str]) -> dict[str, Any]:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "act", "arguments": {"action": a}}}
        for i, a in enumerate(actions)
    ]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def play_frozen_lake(task: dict[str, Any], actions: list[str]) -> Any:
    async def main() -> Any:
        env = FrozenLakeEnv()
        messages, tools = await env.reset(task, seed=0)
        assert "A" in messages[-1]["content"]
        assert tools[0]["function"]["parameters"]["properties"]["action"]["enum"] == [
            "left",
            "down",
            "right",
            "up",
        ]
        result = await env.step(act_calls(actions))
        await env.close()
        return result

    return asyncio.run(main())


def test_frozen_lake_shortest_path_reaches_the_goal() -> None:
    result = play_frozen_lake({"map": DEFAULT_MAP}, shortest_path(DEFAULT_MAP))
    assert result.done and result.rewards == {"env_reward": 1.0}
    assert result.info["outcome"] == "goal"


def test_frozen_lake_random_maps_are_solvable_by_their_shortest_path() -> None:
    env = FrozenLakeEnv()
    for seed in range(3):
        task = env.default_task(seed)
        result = play_frozen_lake(task, shortest_path(task["map"]))
        assert result.rewards == {"env_reward": 1.0}


def test_frozen_lake_walking_into_a_hole_earns_zero() -> None:
    result = play_frozen_lake({"map": DEFAULT_MAP}, ["right", "down"])  # (1,1) is a hole
    assert result.done and result.rewards == {"env_reward": 0.0}
    assert result.info["outcome"] == "hole"


def test_illegal_action_is_an_error_message_not_a_move() -> None:
    result = play_frozen_lake({"map": DEFAULT_MAP}, ["jump", "right"])
    assert result.messages[0]["content"].startswith("Error: bad arguments for 'act'")
    assert '"left", "down", "right", "up"' in result.messages[0]["content"]
    assert "SAFF" in result.messages[1]["content"] and not result.done


def test_blackjack_is_an_agent_env_with_named_actions() -> None:
    async def main() -> Any:
        env = make_env("blackjack")
        messages, tools = await env.reset({}, seed=3)
        assert "dealer shows" in messages[-1]["content"]
        assert tools[0]["function"]["parameters"]["properties"]["action"]["enum"] == [
            "stick",
            "hit",
        ]
        result = await env.step(act_calls(["stick"]))
        await env.close()
        return result

    result = asyncio.run(main())
    assert result.done and result.rewards["env_reward"] in (-1.0, 0.0, 1.0, 1.5)


def test_an_unplayed_blackjack_hand_is_a_lost_bet() -> None:
    """Answering before the game ends scores -1, below every finished outcome but a loss: at 0
    (the return so far), RL learned to break its tool calls rather than play."""

    async def main() -> tuple[Any, Any]:
        env = make_env("blackjack")
        await env.reset({}, seed=3)
        unplayed = await env.step({"role": "assistant", "content": "I stick."})
        await env.reset({}, seed=3)
        played = await env.step(act_calls(["stick"]))
        await env.close()
        return unplayed, played

    unplayed, played = asyncio.run(main())
    assert unplayed.done and unplayed.rewards == {"env_reward": -1.0}
    assert unplayed.info["outcome"] == "stopped"
    assert played.done and played.info["outcome"] != "stopped"


GYM_IDS = ["forge_agent/Calculator-v0", "forge_agent/CodeExec-v0", "forge_agent/FrozenLake-v0"]


@pytest.mark.parametrize("gym_id", GYM_IDS)
def test_shipped_env_passes_gymnasium_env_checker(gym_id: str) -> None:
    assert gym_id in register_gymnasium_envs()
    env = gymnasium.make(gym_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "no render modes": text envs do not render
        check_env(env.unwrapped)
    env.close()


def test_calculator_through_gymnasium_with_text_actions() -> None:
    task = generate_tasks(1, seed=5)[0]
    register_gymnasium_envs()
    env = gymnasium.make("forge_agent/Calculator-v0")
    obs, info = env.reset(seed=0, options={"task": task})
    assert task["prompt"] in obs and info["tools"][0]["function"]["name"] == "calculator"
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "%s"}}</tool_call>'
    obs, reward, terminated, _truncated, info = env.step(call % task["expression"])
    assert task["answer"] in obs and reward == 0.0 and not terminated
    obs, reward, terminated, _truncated, info = env.step(task["answer"])
    assert reward == 1.0 and terminated and info["rewards"] == {"correct": 1.0}
    env.close()


def test_text_action_parsing() -> None:
    message = parse_text_action('hi <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    assert message["content"] == "hi"
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": {"x": 1}}
    broken = parse_text_action("<tool_call>{not json</tool_call>")
    assert broken["tool_calls"][0]["function"]["name"] == ""


def test_importing_the_adapter_registers_nothing() -> None:
    """Registration is an explicit call (`register_gymnasium_envs`), not an import side effect."""
    import subprocess
    import sys

    code = (
        "import gymnasium, forge_agent.env.adapters.gymnasium, forge_agent.env.adapters.agent_gym; "
        "print(sum(k.startswith('forge_agent/') for k in gymnasium.registry))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", out.stdout + out.stderr


def act(action: str) -> dict[str, Any]:
    """An assistant message calling the `act` tool."""
    call = {"name": "act", "arguments": json.dumps({"action": action})}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c0", "type": "function", "function": call}],
    }


async def cliff_episode(actions: list[str], answer: bool) -> list[StepResult]:
    """One CliffWalking episode through an env worker: `actions`, then (with `answer`) a
    text answer that ends it unfinished; the step results."""
    config = EnvConfig("gymnasium:CliffWalking-v1", kwargs={}, step_timeout_s=10)
    async with EnvPool(ResolvedEnv.of(config), size=1) as pool, pool.lease() as env:
        await env.reset({"task_id": "cliff", "seed": 0}, 0)
        results = [await env.step(act(a)) for a in actions]
        if answer:
            results.append(await env.step({"role": "assistant", "content": "I stop here."}))
    return results


def test_a_gymnasium_id_pays_each_steps_reward_as_it_comes_through_the_worker() -> None:
    """Cut short by max_turns, an episode scores the return it earned, not 0."""
    results = asyncio.run(cliff_episode(["up", "right"], answer=False))
    assert [r.rewards["env_reward"] for r in results] == [-1.0, -1.0]
    assert not any(r.done for r in results)


def test_quitting_a_gymnasium_game_scores_its_worst_return() -> None:
    """CliffWalking's every move can cost the cliff's -100: a quit scores -100 x 100 moves
    (the game has no TimeLimit: `DEFAULT_MAX_MOVES`), whatever it earned before."""
    results = asyncio.run(cliff_episode(["up"], answer=True))
    assert results[-1].done and results[-1].info["outcome"] == "stopped"
    assert sum(r.rewards["env_reward"] for r in results) == -100.0 * 100


def test_a_gymnasium_id_gymnasium_refuses_names_the_ids_it_knows() -> None:
    from forge_agent.errors import SetupError

    with pytest.raises(SetupError, match=r"gymnasium:Taxi-v3.*deprecated.*Taxi-v4"):
        make_env("gymnasium:Taxi-v3")


def test_an_unfinished_reward_in_env_kwargs_wins_over_the_worst_return() -> None:
    async def quit_at_once() -> StepResult:
        env = make_env("gymnasium:CliffWalking-v1", unfinished_reward=-5.0)
        await env.reset({"task_id": "cliff", "seed": 0}, 0)
        return await env.step({"role": "assistant", "content": "I stop here."})

    assert asyncio.run(quit_at_once()).rewards == {"env_reward": -5.0}


# ---------------------------------------------------------------- one rule for unfinished games
FORMS = {
    "class": lambda gym_id, **kw: make_env(
        "forge_agent.env.adapters.gymnasium:GymnasiumAgentEnv", gym_id=gym_id, **kw
    ),
    "id": lambda gym_id, **kw: make_env(f"gymnasium:{gym_id}", **kw),
}
GAMES = ["Taxi-v4", "CliffWalking-v1", "FrozenLake-v1"]
QUIT = {"role": "assistant", "content": "I stop here."}


async def episode_return(env: Any, moves: list[str], quit: bool, seed: int = 0) -> float:
    """One episode: `moves` (one `act` a turn, until the game ends), then (with `quit`) an
    answer instead of a move; the sum of every step's rewards."""
    await env.reset({"task_id": "t", "seed": seed}, seed)
    total, done = 0.0, False
    for move in moves:
        result = await env.step(act(move))
        total += sum(result.rewards.values())
        if done := result.done:
            break
    if quit and not done:
        result = await env.step(QUIT)
        total += sum(result.rewards.values())
    return total


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("gym_id", GAMES)
def test_an_unfinished_game_scores_one_fixed_number_whatever_was_played_before(form, gym_id):
    """Taxi by id scored a quit -10 at once, -19 after 19 moves, and -19 once the env had
    seen a -19 episode: now every quit scores the env's failure reward, in every form."""
    env = FORMS[form](gym_id)
    first_move = ACTION_NAMES[gym_id][0]

    async def quits() -> list[float]:
        at_once = await episode_return(env, [], quit=True)
        after_19 = await episode_return(env, [first_move] * 19, quit=True)
        again = await episode_return(env, [], quit=True)  # after a long, costly episode
        return [at_once, after_19, again]

    assert asyncio.run(quits()) == [env.failure_reward] * 3
    assert env.failure_reward == FORMS["id" if form == "class" else "class"](gym_id).failure_reward


@pytest.mark.parametrize("gym_id", GAMES)
def test_quitting_never_scores_above_playing_to_the_move_cap(gym_id):
    """Random play to the game's end (or its move cap) never scores below a quit."""
    import random

    env = make_env(f"gymnasium:{gym_id}", max_moves=20)
    rng = random.Random(0)

    async def returns() -> list[float]:
        names = ACTION_NAMES[gym_id]
        played = []
        for seed in range(12):
            moves = [rng.choice(names) for _ in range(20)]
            played.append(await episode_return(env, moves, quit=False, seed=seed))
        return played

    played = asyncio.run(returns())
    assert min(played) >= env.failure_reward
    quit_at_once = asyncio.run(episode_return(env, [], quit=True))
    assert quit_at_once == env.failure_reward <= min(played)


def test_the_worst_return_is_the_worst_move_times_the_move_cap():
    assert make_env("gymnasium:Taxi-v4").failure_reward == -10.0 * 200  # its TimeLimit
    assert make_env("gymnasium:Taxi-v4", max_moves=20).failure_reward == -10.0 * 20
    assert make_env("gymnasium:CliffWalking-v1", max_moves=16).failure_reward == -100.0 * 16
    assert make_env("gymnasium:FrozenLake-v1").failure_reward == 0.0  # no move costs


def test_a_game_ends_truncated_at_its_move_cap_scored_its_return():
    env = make_env("gymnasium:Taxi-v4", max_moves=3)
    assert asyncio.run(episode_return(env, ["north"] * 5, quit=False)) == -3.0
    assert env.truncated


def test_the_class_path_scores_an_unplayed_cliff_through_a_worker_as_the_id_does():
    """docs/envs.md's `GymnasiumAgentEnv` class path scored an unplayed CliffWalking 0."""

    async def quit_in_a_worker(env_id: str, kwargs: dict[str, Any]) -> tuple[float, float]:
        config = EnvConfig(env_id, kwargs=kwargs, step_timeout_s=10)
        async with EnvPool(ResolvedEnv.of(config), size=1) as pool, pool.lease() as env:
            await env.reset({"task_id": "cliff", "seed": 0}, 0)
            result = await env.step(QUIT)
            return sum(result.rewards.values()), env.failure_reward

    path = "forge_agent.env.adapters.gymnasium:GymnasiumAgentEnv"
    by_class = asyncio.run(quit_in_a_worker(path, {"gym_id": "CliffWalking-v1", "max_moves": 16}))
    by_id = asyncio.run(quit_in_a_worker("gymnasium:CliffWalking-v1", {"max_moves": 16}))
    assert by_class == by_id == (-1600.0, -1600.0)


def test_a_textarena_game_s_failure_reward_is_its_lost_game():
    assert make_env("textarena:TicTacToe-v0").failure_reward == -1.0  # win 1, draw 0, loss -1


# ---------------------------------------------------------------- demonstrations from the table
@pytest.mark.parametrize(
    ("gym_id", "kwargs", "moves", "last_reward"),
    [
        ("FrozenLake-v1", {"make_kwargs": {"is_slippery": False}}, 6, "Reward: 1\n"),
        ("Taxi-v4", {"max_moves": 30}, None, "Reward: 20\n"),
        ("CliffWalking-v1", {"max_moves": 20}, 13, "Reward: -1\n"),
    ],
)
def test_a_deterministic_game_demonstrates_best_return_games_in_its_own_replies(
    gym_id, kwargs, moves, last_reward
):
    """`gymnasium:FrozenLake-v1` (not slippery) learned nothing from the schema warm start's
    one to three calls; a game with a deterministic table now demonstrates whole games."""
    from forge_agent.warm_start import demonstration_source

    env = make_env(f"gymnasium:{gym_id}", **kwargs)
    demos = env.demonstrations(6, 0, 1.0)
    assert len(demos) == 6 and demos == env.demonstrations(6, 0, 1.0)  # deterministic
    for demo in demos:
        convo, tools = demo["messages"], demo["tools"]
        assert demo["task"]["seed"] is not None  # its start: `--check` replays it there
        calls = [m for m in convo if m.get("tool_calls")]
        assert moves is None or len(calls) == moves  # a shortest path
        assert last_reward in convo[-1]["content"] + "\n" and "terminated" in convo[-1]["content"]
        assert tools[0]["function"]["name"] == "act"
    assert (
        demonstration_source(ResolvedEnv.of(f"gymnasium:{gym_id}", kwargs=kwargs))
        == "demonstrations"
    )


def test_a_game_without_a_deterministic_table_falls_back_to_the_tool_schemas():
    from forge_agent.warm_start import demonstration_source

    assert make_env("gymnasium:FrozenLake-v1").demonstrations(2, 0, 1.0) == []  # slippery
    assert demonstration_source(ResolvedEnv.of("gymnasium:FrozenLake-v1")) == "tool schemas"


# ---------------------------------------------------------------- compact observations
@pytest.mark.parametrize(
    ("gym_id", "kwargs", "first", "after"),
    [
        (
            "FrozenLake-v1",
            {"make_kwargs": {"is_slippery": False}},
            "You are at row 0, column 0.",
            "You are at row 1, column 0.\nReward: 0",
        ),
        ("CliffWalking-v1", {}, "You are at row 3, column 0.", "You are at row 2, column 0."),
        (
            "Taxi-v4",
            {},
            "Taxi at (1, 1). Passenger at Y (4, 0). Destination R (0, 0).",
            "Taxi at (0, 1). Passenger at Y (4, 0). Destination R (0, 0).\nReward: -1",
        ),
    ],
)
def test_a_compact_observation_is_one_line_of_the_game_s_state(gym_id, kwargs, first, after):
    """`observation: compact` says where the player is (Taxi: where the taxi, the passenger and
    the destination are) in one line, not the whole map each move."""
    move = {"FrozenLake-v1": "down", "CliffWalking-v1": "up", "Taxi-v4": "north"}[gym_id]

    async def main() -> tuple[str, str]:
        env = make_env(f"gymnasium:{gym_id}", observation="compact", **kwargs)
        messages, _ = await env.reset({"task_id": "t", "seed": 2}, seed=2)
        result = await env.step(act_calls([move]))
        await env.close()
        return messages[-1]["content"], result.messages[-1]["content"]

    shown, reply = asyncio.run(main())
    assert shown == first
    assert reply.startswith(after)


def test_a_compact_game_demonstrates_in_compact_replies() -> None:
    env = make_env("gymnasium:Taxi-v4", max_moves=30, observation="compact")
    convo = env.demonstrations(1, 0, 1.0)[0]["messages"]
    assert convo[1]["content"].startswith("Taxi at (")
    assert "Passenger in the taxi." in "".join(m.get("content") or "" for m in convo)
    assert "Reward: 20\n" in convo[-1]["content"] + "\n"


def test_compact_observation_names_the_games_it_knows_for_one_it_does_not() -> None:
    with pytest.raises(ValueError, match=r"no renderer for Acrobot-v1.*FrozenLake-v1, Taxi-v4"):
        make_env("gymnasium:Acrobot-v1", observation="compact")
    with pytest.raises(ValueError, match=r"'render' or 'compact', got 'short'"):
        make_env("gymnasium:Taxi-v4", observation="short")


# ---------------------------------------------------------------- the shipped configs
@pytest.mark.parametrize("name", ["frozen_lake_by_id.yaml", "taxi.yaml"])
def test_a_shipped_gymnasium_config_resolves_to_a_game_it_demonstrates_and_lets_finish(name):
    """`apps/agent/frozen_lake_by_id.yaml` and `taxi.yaml` (issue 51's one-command runs):
    their env resolves and builds, demonstrates whole games from its table, ends each game by
    its own move cap within the rollout's turns (`--check` plays an episode of each)."""
    from pathlib import Path

    from forge_agent.run.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "apps" / "agent" / name)
    env = ResolvedEnv.of(cfg.env).make()
    assert cfg.env.id.startswith("gymnasium:")
    assert env.max_moves == cfg.rollout.max_turns
    convo = env.demonstrations(1, 0, cfg.warm_start.demo_fraction)[0]["messages"]
    assert "game is over" in convo[-1]["content"]

"""The shipped multi-step envs and their demonstrations: multihop (>= 3 dependent lookups) and
frozen_lake's noisy shortest-path walks, replayed through the real envs."""

from __future__ import annotations

import asyncio
import json

import pytest

from envs.frozen_lake.env import FrozenLakeEnv
from envs.multihop import MultiHopEnv, demonstration, generate_tasks
from forge_agent.env.registry import make_env
from forge_agent.env.resolved import ResolvedEnv


async def _replay(env, task, convo):
    """Step `env` with the demonstration's assistant messages; return the env's tool replies,
    the demonstration's, the final result and the state keys."""
    await env.reset(task, 0)
    got, want, keys, result = [], [], [], None
    for message in convo:
        if message["role"] == "assistant":
            result = await env.step(message)
            got += [m["content"] for m in result.messages]
            keys.append(result.info.get("state_key"))
        elif message["role"] == "tool":
            want.append(message["content"])
    await env.close()
    return got, want, result, keys


def test_multihop_needs_every_lookup_and_the_demonstration_earns_full_reward() -> None:
    env = make_env("multihop", hops=3)
    task = generate_tasks(1, seed=4)[0]
    assert len(task["chain"]) == 4 and task["answer"] == task["records"][task["chain"][-1]]["code"]
    got, want, result, keys = asyncio.run(_replay(env, task, demonstration(task)))
    assert got == want and len(got) == 4  # hops + 1 dependent lookups
    assert result.done and result.rewards == {"correct": 1.0}
    assert keys[:2] == [task["chain"][0], ",".join(sorted(task["chain"][:2]))]
    # the code in hand after fewer lookups is another record's: wrong
    for stop in (1, 2, 3):
        _, _, result, _ = asyncio.run(_replay(env, task, demonstration(task, stop_after=stop)))
        assert result.rewards == {"correct": 0.0} and result.info["outcome"] == "wrong"


def test_multihop_demonstrations_mix_full_and_short_chains() -> None:
    demos = MultiHopEnv().demonstrations(200, seed=0, demo_fraction=0.5)
    lookups = [sum(1 for m in d["messages"] if m.get("tool_calls")) for d in demos]
    assert set(lookups) <= {1, 2, 3, 4} and 0.35 < lookups.count(4) / 200 < 0.75


def test_multihop_rejects_a_chain_longer_than_its_table() -> None:
    with pytest.raises(ValueError, match="records >= hops"):
        MultiHopEnv(hops=5, records=4)


@pytest.mark.parametrize("env_id", ["frozen_lake", "multihop"])
def test_the_warm_start_reads_the_demonstrations_inside_a_running_event_loop(env_id) -> None:
    from forge_agent.warm_start import demonstration_source, demonstrations

    env = ResolvedEnv.of(env_id)

    async def read():  # as the controller's setup does
        return demonstration_source(env), demonstrations(env, 4, 0.5, seed=0)

    source, (convos, tools) = asyncio.run(read())
    assert source == "demonstrations" and len(convos) == 4
    assert [t["function"]["name"] for t in tools] == [
        "act" if env_id == "frozen_lake" else "lookup"
    ]


def test_frozen_lake_demonstrations_are_the_envs_own_replies() -> None:
    env = FrozenLakeEnv()
    clean = [c for c, _ in env.demonstrations(8, seed=1, demo_fraction=1.0)]
    noisy = [c for c, _ in env.demonstrations(40, seed=1, demo_fraction=0.5)]
    assert all("Reward: 1" in d[-1]["content"] for d in clean)  # shortest paths reach G
    assert sum("Reward: 1" in d[-1]["content"] for d in noisy) < 40  # random moves fall in
    from envs.frozen_lake.env import generate_tasks as lake_tasks

    task = lake_tasks(1, seed=1 + 7919)[0]
    got, want, result, keys = asyncio.run(_replay(FrozenLakeEnv(), task, clean[0]))
    assert got == want and result.done and result.rewards == {"env_reward": 1.0}
    assert keys[-1] == str("".join(task["map"]).index("G"))  # the walk ends on the goal cell


def test_frozen_lake_observation_names_the_neighbours_and_the_goal() -> None:
    from envs.frozen_lake.env import DEFAULT_MAP, describe_position

    # SFFF / FHFH / FFFH / HFFG; index 4 is row 2, column 1, with a hole to its right
    assert describe_position(DEFAULT_MAP, 4) == (
        "Row 2, column 1. left edge, down F, right H, up S. Goal: 2 down, 3 right."
    )
    assert describe_position(DEFAULT_MAP, 14).endswith("right G, up F. Goal: 1 right.")
    env = FrozenLakeEnv()
    messages, _ = asyncio.run(env.reset({"map": DEFAULT_MAP}, 0))
    assert messages[-1]["content"].endswith("Goal: 3 down, 3 right.")
    assert "Row 1, column 2. left S" in env._act("right")


def test_frozen_lake_can_show_the_board_in_the_first_prompt_only() -> None:
    from envs.frozen_lake.env import DEFAULT_MAP, describe_position

    assert describe_position(DEFAULT_MAP, 4, compact=True) == (
        "At 2,1: left=edge down=F right=H up=S. Goal: 2 down, 3 right."
    )
    env = FrozenLakeEnv(board="first")
    messages, _ = asyncio.run(env.reset({"map": DEFAULT_MAP}, 0))
    assert messages[-1]["content"] == (
        "AFFF\nFHFH\nFFFH\nHFFG\nAt 1,1: left=edge down=F right=F up=edge. Goal: 3 down, 3 right."
    )
    reply = env._act("right")
    assert reply == "At 1,2: left=S down=H right=F up=edge. Goal: 3 down, 2 right.\nReward: 0"
    with pytest.raises(ValueError, match="board must be one of"):
        FrozenLakeEnv(board="never")


def test_frozen_lake_sight_names_the_cells_beyond_the_neighbours() -> None:
    from envs.frozen_lake.env import DEFAULT_MAP, describe_position

    # SFFF / FHFH / FFFH / HFFG; index 4 is row 2, column 1
    assert describe_position(DEFAULT_MAP, 4, compact=True, sight=2) == (
        "At 2,1: left=edge down=F,H right=H,F up=S,edge. Goal: 2 down, 3 right."
    )
    env = FrozenLakeEnv(board="first", sight=2)
    asyncio.run(env.reset({"map": DEFAULT_MAP}, 0))
    assert env._act("down").startswith("At 2,1: left=edge down=F,H right=H,F up=S,edge.")
    with pytest.raises(ValueError, match="sight must be an int >= 1"):
        FrozenLakeEnv(sight=0)


def test_frozen_lake_move_list_names_the_moves_in_the_action_words() -> None:
    from envs.frozen_lake.env import DEFAULT_MAP, describe_position

    # SFFF / FHFH / FFFH / HFFG; index 4 is row 2, column 1, with a hole to its right
    assert describe_position(DEFAULT_MAP, 4, compact=True, move_list="safe") == (
        "At 2,1: left=edge down=F right=H up=S. Goal: 2 down, 3 right. Safe: left, down, up."
    )
    assert describe_position(DEFAULT_MAP, 4, compact=True, move_list="holes").endswith(
        "Goal: 2 down, 3 right. Holes: right."
    )
    assert describe_position(DEFAULT_MAP, 0, move_list="holes").endswith("Holes: none.")
    env = FrozenLakeEnv(board="first", move_list="safe")
    asyncio.run(env.reset({"map": DEFAULT_MAP}, 0))
    assert env._act("right").startswith(
        "At 1,2: left=S down=H right=F up=edge. Goal: 3 down, 2 right. Safe: left, right, up."
    )


def test_frozen_lake_rejects_an_unknown_move_list() -> None:
    from envs.frozen_lake.env import DEFAULT_MAP, describe_position

    with pytest.raises(
        ValueError, match=r"move_list must be one of \('none', 'safe', 'holes'\), got 'exits'"
    ):
        FrozenLakeEnv(move_list="exits")
    with pytest.raises(ValueError, match="move_list must be one of"):
        describe_position(DEFAULT_MAP, 0, move_list="Safe")


def test_frozen_lake_safe_demonstrations_only_take_listed_moves() -> None:
    env = FrozenLakeEnv(board="first", max_moves=12, demo_noise="safe", move_list="safe")
    for convo, _ in env.demonstrations(20, seed=2, demo_fraction=0.5):
        lines = [m["content"] for m in convo if m["role"] in ("user", "tool")]
        actions = [
            m["tool_calls"][0]["function"]["arguments"] for m in convo if m.get("tool_calls")
        ]
        for line, action in zip(lines[:-1], actions, strict=True):  # the last reply ends it
            listed = line.split("Safe: ")[1].split(".")[0].split(", ")
            assert json.loads(action)["action"] in listed


def test_frozen_lake_demonstrations_follow_the_board_view() -> None:
    env = FrozenLakeEnv(board="first", max_moves=12)
    convos = [c for c, _ in env.demonstrations(8, seed=1, demo_fraction=1.0)]
    for convo in convos:
        replies = [m["content"] for m in convo if m["role"] == "tool"]
        assert convo[1]["content"].count("\n") == 4  # the prompt: 4 board rows, then the line
        assert all(r.startswith("At ") and r.count("\n") <= 2 for r in replies)  # no board
        assert "Reward: 1" in replies[-1]


def test_frozen_lake_safe_demonstration_noise_never_steps_into_a_hole() -> None:
    from envs.frozen_lake.env import DEFAULT_MAP, safe_moves

    assert safe_moves(DEFAULT_MAP, 4) == ["left", "down", "up"]  # right of (2,1) is a hole
    env = FrozenLakeEnv(board="first", max_moves=12, demo_noise="safe")
    convos = [c for c, _ in env.demonstrations(40, seed=1, demo_fraction=0.3)]
    ends = [c[-1]["content"] for c in convos]
    assert not any("(terminated)" in e and "Reward: 0" in e for e in ends)  # no hole
    assert any("out of time" in e for e in ends)  # but the random moves wander
    with pytest.raises(ValueError, match="demo_noise must be one of"):
        FrozenLakeEnv(demo_noise="never")

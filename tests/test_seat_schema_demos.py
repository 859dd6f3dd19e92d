"""A seated game without `demonstrations()` gets its warm start from its tool schemas too."""

from __future__ import annotations

import textwrap

import pytest

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.warm_start.schema_demos import schema_demonstrations

GAME = """
from forge_agent.env import SeatEnv
from forge_agent.types import SeatStart, SeatStep

DROP = {"type": "function", "function": {
    "name": "drop", "description": "Drop a disc into a column.",
    "parameters": {"type": "object", "required": ["column"],
                   "properties": {"column": {"type": "integer", "enum": [0, 1, 2]}}}}}


class ColumnGame(SeatEnv):
    seats = ("player_0", "player_1")

    def reset(self, task, seed=None):
        seats = {s: ([{"role": "user", "content": f"You are {s}. Drop a disc."}], [DROP])
                 for s in self.seats}
        return SeatStart(seats=seats, turn="player_0")

    def step(self, assistant_message):
        moved = {"role": "user", "content": "Your disc fell."}
        return SeatStep(messages={"player_0": [moved]}, turn="player_1")

    def tasks(self, split, n, seed):
        return [{"task_id": f"c{seed}-{i}"} for i in range(n)]
"""


def test_a_seated_games_schema_demonstrations_are_the_moving_seats_calls(tmp_path, monkeypatch):
    (tmp_path / "schema_seat_game.py").write_text(textwrap.dedent(GAME))
    monkeypatch.syspath_prepend(str(tmp_path))

    convos = schema_demonstrations(ResolvedEnv.of("schema_seat_game:ColumnGame"), 3, seed=0)

    assert len(convos) == 3
    for messages, tools in convos:
        assert messages[0]["content"] == "You are player_0. Drop a disc."
        assert messages[1]["tool_calls"][0]["function"]["name"] == "drop"
        assert messages[2] == {"role": "user", "content": "Your disc fell."}
        assert len(messages) == 3 and [t["function"]["name"] for t in tools] == ["drop"]


def test_textarena_connect_four_has_no_schema_demonstrations_and_does_not_crash():
    assert schema_demonstrations(ResolvedEnv.of("textarena:ConnectFour-v0"), 2, seed=0) == []


LOUD = """
from forge_agent.env import ToolEnv


def shout(word: str) -> str:
    \"\"\"Repeat a word many times.\"\"\"
    return (word + " ") * 5000


class LoudEnv(ToolEnv):
    tools = [shout]

    def tasks(self, split, n, seed):
        return [{"task_id": f"l{seed}-{i}", "prompt": "Shout a word."} for i in range(n)]

    def judge(self, answer):
        return {"correct": 0.0}


class BrokenStepEnv(LoudEnv):
    async def step(self, assistant_message):
        raise ConnectionError("booking backend went away")
"""


def test_schema_demonstrations_are_played_by_the_episode_loop(tmp_path, monkeypatch):
    """A scripted player in `Episode`: the env's tool outputs are cut as a run's are
    (`rollout.tool_output_tokens`), and a step that fails is raised, not skipped."""
    (tmp_path / "loud_env.py").write_text(textwrap.dedent(LOUD))
    monkeypatch.syspath_prepend(str(tmp_path))

    convos = schema_demonstrations(ResolvedEnv.of("loud_env:LoudEnv"), 2, seed=0)
    replies = [m for messages, _ in convos for m in messages if m["role"] == "tool"]
    assert replies and all(len(m["content"]) < 1000 for m in replies)  # 30,000+ characters
    assert all(m["content"].endswith("[truncated]") for m in replies)

    with pytest.raises(ConnectionError, match="booking backend went away"):
        schema_demonstrations(ResolvedEnv.of("loud_env:BrokenStepEnv"), 2, seed=0)

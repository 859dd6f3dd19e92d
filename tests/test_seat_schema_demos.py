"""A seated game without `demonstrations()` gets its warm start from its tool schemas too."""

from __future__ import annotations

import textwrap

from forge_agent.env.demonstrations import schema_demonstrations
from forge_agent.env.resolved import ResolvedEnv

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

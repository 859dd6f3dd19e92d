"""Small seated envs and players for multi-seat tests; importable by env worker processes."""

from __future__ import annotations

from typing import Any, ClassVar

from forge_agent.env import SeatEnv
from forge_agent.types import Message, SeatStart, SeatStep


class CountingGame(SeatEnv):
    """Two seats say numbers in turn for `rounds` rounds; `player_0` always wins (a first-mover
    advantage: +1 / -1), unless the task says `winner`."""

    seats: ClassVar[tuple[str, ...]] = ("player_0", "player_1")
    zero_sum: ClassVar[bool] = True

    def __init__(self, rounds: int = 2, rogue_turn: str | None = None) -> None:
        self.rounds, self.rogue_turn = rounds, rogue_turn

    def reset(self, task: dict[str, Any], seed: int | None = None) -> SeatStart:
        self.task, self.moves = task, 0
        go: Message = {"role": "user", "content": "Go."}
        seats = {s: ([{"role": "system", "content": f"You are {s}."}, go], []) for s in self.seats}
        seats["player_1"][0].pop()  # player_1 hears of the game with player_0's first move
        return SeatStart(seats=seats, turn="player_0", zero_sum=True)

    def step(self, assistant_message: Message) -> SeatStep:
        self.moves += 1
        mover = self.seats[(self.moves - 1) % 2]
        other = self.seats[self.moves % 2]
        if self.rogue_turn is not None:
            return SeatStep(messages={}, turn=self.rogue_turn)
        if self.moves >= 2 * self.rounds:
            winner = self.task.get("winner", "player_0")
            loser = "player_1" if winner == "player_0" else "player_0"
            rewards = {winner: {"outcome": 1.0}, loser: {"outcome": -1.0}}
            return SeatStep(rewards=rewards, done=True, info={"outcome": f"{winner} won"})
        said = {"role": "user", "content": f"{mover} said {assistant_message.get('content')}."}
        return SeatStep(messages={other: [said]}, turn=other)


def say_seven(messages: list[Message], tools: list[Any]) -> str:
    """A scripted player: always says 7."""
    return "7"


def broken_player(messages: list[Message], tools: list[Any]) -> str:
    raise RuntimeError("scripted player is broken")

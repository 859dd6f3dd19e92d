"""Small seated envs and players for multi-seat tests; importable by env worker processes."""

from __future__ import annotations

from typing import Any, ClassVar

from forge_agent.env import SeatEnv
from forge_agent.types import Message, SeatStart, SeatStep


class CountingGame(SeatEnv):
    """Seats say numbers in turn for `rounds` rounds (every other seat hears each move);
    `player_0` always wins (a first-mover advantage: +1, the others share -1), unless the task
    says `winner`."""

    seats: ClassVar[tuple[str, ...]] = ("player_0", "player_1")
    zero_sum: ClassVar[bool] = True
    failure_reward: ClassVar[float] = -1.0  # a forfeit (or a failed move) loses the game

    def __init__(self, rounds: int = 2, rogue_turn: str | None = None) -> None:
        self.rounds, self.rogue_turn = rounds, rogue_turn

    def reset(self, task: dict[str, Any], seed: int | None = None) -> SeatStart:
        self.task, self.moves = task, 0
        go: Message = {"role": "user", "content": "Go."}
        seats = {s: ([{"role": "system", "content": f"You are {s}."}, go], []) for s in self.seats}
        for s in self.seats[1:]:  # the others hear of the game with the moves before theirs
            seats[s][0].pop()
        return SeatStart(seats=seats, turn="player_0", zero_sum=True)

    def step(self, assistant_message: Message) -> SeatStep:
        n = len(self.seats)
        self.moves += 1
        mover = self.seats[(self.moves - 1) % n]
        other = self.seats[self.moves % n]
        if self.rogue_turn is not None:
            return SeatStep(messages={}, turn=self.rogue_turn)
        if assistant_message.get("content") == "boom":  # a judge that cannot parse a move
            raise ValueError(f"cannot parse {mover}'s move")
        if self.moves >= n * self.rounds:
            winner = self.task.get("winner", "player_0")
            rewards = {s: {"outcome": 1.0 if s == winner else -1.0 / (n - 1)} for s in self.seats}
            return SeatStep(rewards=rewards, done=True, info={"outcome": f"{winner} won"})
        said = {"role": "user", "content": f"{mover} said {assistant_message.get('content')}."}
        return SeatStep(messages={s: [said] for s in self.seats if s != mover}, turn=other)

    def tasks(self, split: str, n: int, seed: int) -> list[dict[str, Any]]:
        return [{"task_id": f"count-{split}-{seed}-{i}"} for i in range(n)]


class FourSeatGame(CountingGame):
    """Four seats in turn: a run can seat the policy twice (self-play), a snapshot and a
    scripted player at once."""

    seats: ClassVar[tuple[str, ...]] = ("player_0", "player_1", "player_2", "player_3")


def say_seven(messages: list[Message], tools: list[Any]) -> str:
    """A scripted player: always says 7."""
    return "7"


def broken_player(messages: list[Message], tools: list[Any]) -> str:
    raise RuntimeError("scripted player is broken")

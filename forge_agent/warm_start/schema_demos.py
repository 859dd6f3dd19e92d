"""Demonstrations of the call format for an env without `demonstrations()`, played through the
episode loop (`forge_agent.rollout.episode.Episode`) by a scripted player, `SchemaCaller`.

Each demonstration resets the env on a training task; the seat to move makes 1 to
`SCHEMA_DEMO_MAX_CALLS` well-formed calls with arguments sampled from its tool schemas
(`forge_agent.env.demonstrations.sampled_call`: enum values, words of the prompt, small
numbers), sees the env's real answers, and ends with a short final answer, unless the env
ends the episode first. In a seated game the demonstration is the moving seat's: its calls
until its move is made (the turn passes to another seat) or the game ends. The episode loop
plays it as it plays a run's episodes: the same resets and steps, the same failures, tool
outputs cut to `rollout.tool_output_tokens`.

They teach the call format only, not the task: a policy warm-started on them calls the env's
tools at all, so RL sees groups whose rewards differ.
"""

from __future__ import annotations

import random
from typing import Any

from forge_agent.env.demonstrations import (
    SCHEMA_DEMO_MAX_CALLS,
    Conversation,
    final_answer,
    run_sync,
    sampled_call,
)
from forge_agent.env.protocol import env_seats
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.episode import Episode
from forge_agent.rollout.game import SOLO, EpisodeContext, Seat, SoloGame
from forge_agent.types import Completion, Message, Status, ToolSpec

__all__ = ["SchemaCaller", "schema_demonstrations"]


class Handover(Exception):
    """The scripted seat's demonstration is over (it answered, or the turn passed)."""

    status = Status.OK


class SchemaCaller:
    """Plays the first seat asked to move with sampled calls, then a final answer; any other
    seat, or a turn after the answer, ends the episode (`Handover`)."""

    label = "schema calls"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.calls = rng.randint(1, SCHEMA_DEMO_MAX_CALLS)
        self.seat: str | None = None
        self.answered = False
        self.no_tools = False

    def player(self, seat: str) -> Any:
        """The `Player` of `seat` (one script behind every seat of the game)."""
        caller = self

        class SeatPlayer:
            label = caller.label

            async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Message:
                return caller.act(seat, messages, tools)

        return SeatPlayer()

    def act(self, seat: str, messages: list[Message], tools: list[ToolSpec]) -> Message:
        if self.seat is None:
            self.seat = seat
            self.no_tools = not tools
        if seat != self.seat or self.answered or self.no_tools:
            raise Handover(f"seat {seat!r} is not demonstrated")
        made = sum(1 for m in messages if m.get("role") == "assistant")
        if made < self.calls:
            call = sampled_call(self.rng.choice(tools), messages, self.rng, f"call_{made}")
            return {"role": "assistant", "content": "", "tool_calls": [call]}
        self.answered = True
        return {"role": "assistant", "content": final_answer(messages, self.rng)}


_SCRIPTED = RolloutConfig(max_turns=SCHEMA_DEMO_MAX_CALLS + 1)
"""The limits of a scripted episode: its calls and its answer."""


async def _no_policy(prompt_ids: list[int], *args: Any, **kwargs: Any) -> Completion:
    raise RuntimeError("scripted play has no policy seat to generate for")


async def _demonstrate(instance: Any, task: dict[str, Any], seed: int, rng: Any) -> Any:
    """One scripted episode of the env `instance` on `task`: (its conversation, its tools), or
    None when the seat to move is offered no tools."""
    names = env_seats(instance) or (SOLO,)
    script = SchemaCaller(rng)
    seats = {name: Seat(name, player=script.player(name)) for name in names}
    game = instance if names != (SOLO,) else SoloGame(instance)
    ctx = EpisodeContext(_no_policy, None, _SCRIPTED, limit=1 << 30)  # type: ignore[arg-type]
    episode = Episode(ctx, game, seats)
    await episode.play(task, seed)
    stop = episode.stopped
    if stop is not None and not isinstance(stop.__cause__, Handover):  # the env failed
        if isinstance(stop.__cause__, Exception):
            raise stop.__cause__  # as the env raised it (a bad tool schema at reset, ...)
        raise RuntimeError(f"a scripted episode failed: {stop.error}")
    if script.no_tools or script.seat is None:
        return None
    seat = seats[script.seat]
    messages = list(seat.messages) + ([] if script.answered else list(seat.pending))
    return messages, list(seat.tools)


def schema_demonstrations(env: ResolvedEnv, n: int, seed: int) -> list[Conversation]:
    """`n` demonstrations of `env`'s call format (see the module docstring); [] when the env
    offers the seat to move no tools. An env whose reset or step fails raises, naming it."""
    tasks = load_tasks(env, "train", n, seed=seed)
    rng = random.Random(f"schema-demos-{env.spec.env_id}-{seed}")

    async def play() -> list[Conversation]:
        out: list[Conversation] = []
        instance = env.make()
        try:
            for i, task in enumerate(tasks):
                demo = await _demonstrate(instance, task, seed + i, rng)
                if demo is None:
                    return []
                out.append(demo)
        finally:
            await instance.close()
        return out

    return run_sync(play())

"""What an episode is played over: its seats, a one-seat env as a game of one seat, and the
context every episode of a runner shares (`forge_agent.rollout.episode` plays it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forge_agent.generator.config import GenerateFn
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.context import Compactor
from forge_agent.rollout.history import TokenHistory
from forge_agent.rollout.players import Player
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.types import (
    Message,
    SeatStart,
    SeatStep,
    StepResult,
    ToolSpec,
    Trajectory,
)

if TYPE_CHECKING:
    from forge_agent.env.protocol import EpisodeEnv

START_STATE = "<start>"
"""`Trajectory.turn_states[0]`: the state an episode starts from, the same for a whole group."""

SOLO = "agent"
"""The seat of a one-seat episode (not named in its trajectory)."""


@dataclass
class EpisodeContext:
    """What every episode of one runner shares: the policy's generate function and renderer,
    the rollout limits (`RolloutConfig`), the token budget of one segment, the context
    strategy, and the runner's counters."""

    generate: GenerateFn
    renderer: ChatRenderer
    config: RolloutConfig
    limit: int
    compactor: Compactor | None = None
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def context_budget(self) -> int:
        """Prompt tokens a turn may start from before the context strategy rewrites it."""
        budget = self.config.context.budget
        if budget is None:
            budget = self.limit - self.config.max_new_tokens_per_turn
        return max(1, min(budget, self.limit - 1))


@dataclass
class Seat:
    """One seat's side of an episode: a policy seat (`player` None) writes `traj` through its
    token history; `messages` is what the seat sees (the context strategy may rewrite it), the
    trajectory's `messages` the whole transcript."""

    name: str
    player: Player | None = None
    traj: Trajectory | None = None
    messages: list[Message] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    pending: list[Message] = field(default_factory=list)  # received since its last move
    turns: int = 0
    version: int | None = None  # a snapshot player's version for this episode
    history: TokenHistory | None = None

    session: str = ""  # the generator session of its turns (one replica's prefix cache)

    def __post_init__(self) -> None:
        if self.traj is not None:
            self.traj.messages = self.messages
            if self.history is None:
                self.history = TokenHistory(self.traj)

    def see(self, messages: list[Message]) -> None:
        """`messages` join what the seat sees and its transcript."""
        self.messages.extend(messages)
        if self.traj is not None and self.traj.messages is not self.messages:
            self.traj.messages.extend(messages)


class SoloGame:
    """A one-seat env (`reset` -> messages and tools, `step` -> `StepResult`) as a game of one
    seat, `SOLO`, so that single-agent episodes run the one loop."""

    def __init__(self, env: EpisodeEnv) -> None:
        self.env = env

    @property
    def failure_reward(self) -> float:
        return float(getattr(self.env, "failure_reward", 0.0))

    async def reset(self, task: dict[str, Any], seed: int | None) -> SeatStart:
        start = await self.env.reset(task, seed)
        if isinstance(start, SeatStart):
            raise TypeError(
                f"the env is a game of seats {sorted(start.seats)}: give it players "
                "(env.seats in a config) to play it"
            )
        messages, tools = start
        return SeatStart(seats={SOLO: (messages, tools)}, turn=SOLO)

    async def step(self, move: Message) -> SeatStep:
        result: StepResult = await self.env.step(move)
        return SeatStep(
            messages={SOLO: list(result.messages)},
            turn=None if result.done else SOLO,
            rewards={SOLO: dict(result.rewards)} if result.rewards else {},
            done=result.done,
            info=dict(result.info),
        )

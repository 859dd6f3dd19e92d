"""Blackjack-v1 from Gymnasium, played through the `act` tool (stick or hit).

No code of its own beyond naming the game: `GymnasiumAgentEnv` renders the hand as text and
makes its tasks from start seeds. Registered as `blackjack` by the project's entry points.
"""

from typing import ClassVar

from forge_agent.env.adapters.gymnasium import GymnasiumAgentEnv

__all__ = ["BlackjackEnv"]


class BlackjackEnv(GymnasiumAgentEnv):
    """Gymnasium's Blackjack-v1 as an agent env; reward: the game's outcome (-1, 0 or 1), and
    -1 for a hand left unplayed (the model answered, or its calls failed, before the game
    ended): the bet is lost. Scored 0, an unplayed hand beat playing (the game's expected return
    is negative), and a recorded run learned to break its tool calls within 9 steps.
    `failure_reward` is the same lost bet: a hand cut by `rollout.max_turns` or whose step
    raised scored 0.0 (a push) before, above the -1 of every lost hand."""

    failure_reward: ClassVar[float] = -1.0

    def __init__(self) -> None:
        super().__init__("Blackjack-v1", unfinished_reward=-1.0)

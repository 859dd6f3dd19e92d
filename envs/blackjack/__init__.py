"""Blackjack-v1 from Gymnasium, played through the `act` tool (stick or hit).

No code of its own beyond naming the game: `GymnasiumAgentEnv` renders the hand as text and
makes its tasks from start seeds. Registered as `blackjack` by the project's entry points.
"""

from forge_agent.env.gym_adapter import GymnasiumAgentEnv

__all__ = ["BlackjackEnv"]


class BlackjackEnv(GymnasiumAgentEnv):
    """Gymnasium's Blackjack-v1 as an agent env; reward: the game's outcome (-1, 0 or 1)."""

    def __init__(self) -> None:
        super().__init__("Blackjack-v1")

"""The warm start's settings (`WarmStartConfig`, the `warm_start` section of a run's config) and
what it demonstrates (`WarmEnvs`); light to import (no torch, no renderer)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.typed_config import check_field

if TYPE_CHECKING:
    from forge_agent.rollout.config import RolloutConfig

__all__ = ["DemoCap", "WarmEnvs", "WarmStartConfig"]


@dataclass
class WarmStartConfig:
    """Supervised warm start on the env's demonstrations, so RL starts from non-zero reward.

    Every field is part of the cache key of the warm-started model (see `warm_start`).
    """

    enabled: bool = True
    steps: int = 300
    batch_size: int = 32
    lr: float = 1e-3
    demo_fraction: float = 0.5  # share of demonstrations that use the tool; the rest guess
    num_demos: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        check_field(self.steps >= 0, "steps", self.steps, "an int >= 0")
        check_field(self.batch_size >= 1, "batch_size", self.batch_size, "an int >= 1")
        check_field(self.lr > 0.0, "lr", self.lr, "a float > 0")
        check_field(
            0.0 <= self.demo_fraction <= 1.0,
            "demo_fraction",
            self.demo_fraction,
            "a fraction in [0, 1]",
        )
        check_field(self.num_demos >= 1, "num_demos", self.num_demos, "an int >= 1")


WarmEnvs = Sequence[ResolvedEnv | list[ResolvedEnv]]
"""What a warm start demonstrates: envs, each alone or as a list (a ladder's levels, keyed
together under the env's id)."""


@dataclass(frozen=True)
class DemoCap:
    """The run's episode limits, which a demonstration is cut to (`warm_start.demos`): at most
    `max_turns` assistant turns, each tool or env reply cut to `tool_output_tokens` as the
    rollout cuts it, and no turn kept that ends past `max_total_tokens` (the first turn always
    is). None: no such limit. A Gymnasium game's demonstration is a whole game (CliffWalking:
    ~50 moves, ~7,000 tokens); an episode of the run is not, and what lies past its end is never
    played."""

    max_total_tokens: int | None = None
    max_turns: int | None = None
    tool_output_tokens: int | None = None

    @classmethod
    def of(cls, rollout: RolloutConfig) -> DemoCap:
        """The limits of a run's `rollout` section (a `RolloutConfig`); with a context strategy
        other than `keep` an episode is compacted, not cut, at `max_total_tokens`, so the token
        limit is not applied."""
        keep = rollout.context.strategy == "keep"
        return cls(
            rollout.max_total_tokens if keep else None,
            rollout.max_turns,
            rollout.tool_output_tokens,
        )

    def key(self) -> dict[str, int | None]:
        """The limits as they enter a warm start's cache key."""
        return asdict(self)

    def describe(self) -> str:
        """The limits as config keys, e.g. "rollout.max_turns=4, rollout.max_total_tokens=512"."""
        return ", ".join(f"rollout.{k}={v}" for k, v in asdict(self).items() if v is not None)

"""The warm start's settings (`WarmStartConfig`, the `warm_start` section of a run's config) and
what it demonstrates (`WarmEnvs`); light to import (no torch, no renderer)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from forge_agent.env.resolved import ResolvedEnv

__all__ = ["WarmEnvs", "WarmStartConfig"]


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
        from forge_agent.typed_config import check_field

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

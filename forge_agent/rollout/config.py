"""The rollout's configs: one episode's limits and sampling, and how many episodes run at once
(`RolloutConfig`); how messages become tokens (`RendererConfig`, the `renderer` section).

A light module (dataclasses only, no runner, no torch), so the run's config and the episode's
context can name them without importing the runner or a tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from forge_agent.rollout.context import ContextConfig
from forge_agent.typed_config import check_field

__all__ = ["RendererConfig", "RolloutConfig"]


@dataclass
class RolloutConfig:
    """Limits and sampling of one episode, and how many episodes run at once."""

    max_turns: int = 4
    max_total_tokens: int = 512  # prompt + every turn, per segment
    max_new_tokens_per_turn: int = 48  # shrinks as the budget is spent
    tool_output_tokens: int = 64  # each tool/user message the env returns is cut to this
    max_concurrent_episodes: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    # multi-seat games: a seat that leaves the game unfinished (its move cut at the token cap
    # or the budget, or its `max_turns` spent) loses it by forfeit, scoring `forfeit_reward`
    # (None: the env's `failure_reward`); its trajectory ends `forfeit` and is trained on.
    # `forfeit: false` ends such games truncated instead (`advantages.truncated` applies): an
    # escape from a losing game unless truncated episodes are masked out of the baseline too.
    forfeit: bool = True
    forfeit_reward: float | None = None
    # what a prompt keeps once the transcript outgrows the budget (forge_agent.rollout.context)
    context: ContextConfig = field(default_factory=ContextConfig)

    def __post_init__(self) -> None:
        for key in ("max_turns", "max_total_tokens", "max_new_tokens_per_turn"):
            check_field(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")
        for key in ("tool_output_tokens", "max_concurrent_episodes"):
            check_field(getattr(self, key) >= 1, key, getattr(self, key), "an int >= 1")
        check_field(self.temperature > 0.0, "temperature", self.temperature, "a float > 0")
        check_field(0.0 < self.top_p <= 1.0, "top_p", self.top_p, "a float in (0, 1]")


@dataclass
class RendererConfig:
    """`kind`: "qwen3" (the tiny model and Qwen3 hub models); "chatml", "gemma" or "phi3"
    (a family whose template knows no tools, e.g. SmolLM2, Gemma 3: tools written as text,
    `rollout/text_tools.py`); "llama3" (`renderers`' Llama 3 renderer); "default" (the model's
    own chat template through `renderers`' default renderer); or "auto" (picked from the
    tokenizer's tokens in that order, `renderer.auto_kind`)."""

    kind: Literal["auto", "qwen3", "chatml", "gemma", "phi3", "llama3", "default"] = "auto"
    enable_thinking: bool = False

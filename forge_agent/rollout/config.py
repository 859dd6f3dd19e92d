"""The rollout's configs: one episode's limits and sampling, and how many episodes run at once
(`RolloutConfig`); what a prompt keeps once its transcript outgrows the context
(`ContextConfig`, `rollout.context`); how messages become tokens (`RendererConfig`, the
`renderer` section).

A light module (dataclasses only, no runner, no torch), so the run's config and the episode's
context can name them without importing the runner or a tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from forge_agent.rollout.context import Compactor, drop_tool_outputs
from forge_agent.typed_config import check_field

__all__ = ["ContextConfig", "RendererConfig", "RolloutConfig"]


@dataclass
class ContextConfig:
    """How an episode's prompt is kept within its token budget (`rollout.context`)."""

    strategy: str = "keep"  # keep | drop_tool_outputs | "package.module:function"
    budget: int | None = None  # prompt tokens before a rewrite; None: segment budget - one turn
    keep_last: int = 1  # drop_tool_outputs: the newest tool outputs it never drops
    roles: list[str] = field(default_factory=lambda: ["tool"])  # drop_tool_outputs: what it drops

    def __post_init__(self) -> None:
        check_field(
            self.strategy in ("keep", "drop_tool_outputs") or ":" in self.strategy,
            "strategy",
            self.strategy,
            "'keep', 'drop_tool_outputs' or a function as 'package.module:function'",
        )
        if self.budget is not None:
            check_field(self.budget >= 1, "budget", self.budget, "an int >= 1 or null")
        check_field(self.keep_last >= 0, "keep_last", self.keep_last, "an int >= 0")
        if ":" in self.strategy:  # a user's function: importable now, not at the first episode
            try:
                self.compactor()
            except ValueError as exc:
                check_field(False, "strategy", self.strategy, f"an importable function ({exc})")

    def compactor(self) -> Compactor | None:
        """The strategy as a function (None: keep everything). Raises `ValueError` naming
        `rollout.context.strategy` when a user's function cannot be imported."""
        if self.strategy == "keep":
            return None
        if self.strategy == "drop_tool_outputs":
            keep_last, roles = self.keep_last, tuple(self.roles)

            def drop(messages, tools, budget, count):
                return drop_tool_outputs(messages, budget, count, keep_last, roles)

            return drop
        # imported here: the env registry: +0.07 s at import, measured; only for a compactor named
        # by entry point
        from forge_agent.env.registry import load_entry_point

        try:
            fn = load_entry_point(self.strategy)
        except Exception as exc:
            raise ValueError(
                f"rollout.context.strategy {self.strategy!r} cannot be imported: {exc}"
            ) from exc
        if not callable(fn):
            raise ValueError(f"rollout.context.strategy {self.strategy!r} is not callable")
        return fn


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

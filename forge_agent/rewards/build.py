"""The run's rubric from its config: the outcome component (the env's reward, or an agent
program's own reward function) plus the configured extra components (`rewards.components`).
Built in the reward actors' processes (the controller passes `build_rubric` with its
arguments)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from forge_agent.rewards import (
    RewardComponent,
    Rubric,
    env_outcome,
    length_penalty,
    program_reward,
    thinking_format,
    tool_use,
)

AGENT_REWARD = "agent_reward"
"""The rubric component that runs an agent program's own reward (`env.id=agent:...`)."""


def build_rubric(
    weights: dict[str, float],
    max_total_tokens: int = 512,
    agent_reward: str | None = None,
    failure_reward: float | None = None,
) -> Any:
    """The run's rubric: the outcome (weight 1) plus the configured extra components.

    The outcome is the env's own reward (`env_outcome`) or, for an agent program, its reward
    function `agent_reward` ("module:fn", called as `fn(task, result, transcript)`): run
    here, in the reward actors, like every other component; it judges the policy's answer, so
    its raising is the policy's failure, scored `failure_reward` (`env.failure_reward`, 0.0).
    An extra component is a built-in name (`tool_use`, `length_penalty`, `thinking_format`) or
    the import path of a user reward function, `module:function` (sync or async, takes a
    `Trajectory`, returns a float). A user function judges the policy's answer: its raising is
    the policy's failure (raise `forge_agent.errors.InfraError` for a failure the policy cannot
    cause, e.g. a judge model that is down).
    """
    builtins: dict[str, Callable[[], Any]] = {
        "tool_use": tool_use,
        "length_penalty": lambda: length_penalty(max_total_tokens, max_total_tokens // 4),
        "thinking_format": thinking_format,
    }
    if agent_reward:
        fn = program_reward(_import_reward(agent_reward, "env.kwargs.reward"))
        judge = RewardComponent(
            AGENT_REWARD, fn, 1.0, timeout_s=60.0, judges_policy=True,
            failure_reward=float(failure_reward or 0.0),
        )  # fmt: skip
        components = [judge]
    else:
        components = [RewardComponent("env_outcome", env_outcome(), 1.0)]
    for name, weight in weights.items():
        if name in builtins:
            fn = builtins[name]()
        elif ":" in name:
            fn = _import_reward(name, "rewards.components")
        else:
            raise ValueError(
                f"rewards.components: unknown reward {name!r}; use one of "
                f"{sorted(builtins)} or 'module:function'"
            )
        user = name not in builtins  # a user's function judges the policy's answer
        components.append(
            RewardComponent(
                name,
                fn,
                float(weight),
                timeout_s=30.0,
                judges_policy=user,
                failure_reward=float(failure_reward or 0.0),
            )
        )
    return Rubric(components)


def _import_reward(path: str, key: str) -> Any:
    """The function `module:attr` names; an error names the config key and the path."""
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"{key}: cannot import reward {path!r}: {exc}") from exc

"""Env ids -> env factories: `register(...)` and `make_env(env_id, **kwargs)`.

An entry point is a callable or a `"package.module:Name"` string imported on first use, so
registering an env costs nothing and env workers can rebuild it in another process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forge_agent.env.protocol import AgentEnv

__all__ = ["EnvSpec", "env_spec", "load_entry_point", "make_env", "register", "registered_env_ids"]


@dataclass(frozen=True)
class EnvSpec:
    """How to build one kind of env: an entry point plus default keyword arguments."""

    env_id: str
    entry_point: str | Callable[..., AgentEnv]
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def make(self, **kwargs: Any) -> AgentEnv:
        """A new env instance; `kwargs` override the spec's defaults."""
        factory = load_entry_point(self.entry_point)
        return factory(**{**self.kwargs, **kwargs})


_REGISTRY: dict[str, EnvSpec] = {}


def register(
    env_id: str,
    entry_point: str | Callable[..., AgentEnv],
    *,
    description: str = "",
    overwrite: bool = False,
    **kwargs: Any,
) -> EnvSpec:
    """Register an env under `env_id`; `kwargs` become its default constructor arguments."""
    if env_id in _REGISTRY and not overwrite:
        raise ValueError(f"env id {env_id!r} is already registered; pass overwrite=True")
    spec = EnvSpec(env_id, entry_point, dict(kwargs), description)
    _REGISTRY[env_id] = spec
    return spec


def registered_env_ids() -> list[str]:
    return sorted(_REGISTRY)


def env_spec(env_id: str) -> EnvSpec:
    """The spec of `env_id`; a `"module:Name"` string is accepted as an unregistered id."""
    if env_id in _REGISTRY:
        return _REGISTRY[env_id]
    if ":" in env_id:
        return EnvSpec(env_id, env_id)
    raise KeyError(
        f"unknown env id {env_id!r}; registered ids: {', '.join(registered_env_ids())} "
        "(or pass a 'package.module:Factory' entry point)"
    )


def make_env(env_id: str, **kwargs: Any) -> AgentEnv:
    """A new instance of the env registered as `env_id`, built with `kwargs` over defaults."""
    return env_spec(env_id).make(**kwargs)


def load_entry_point(entry_point: str | Callable[..., Any]) -> Callable[..., Any]:
    """Resolve `"package.module:Name"` (or pass a callable through)."""
    if callable(entry_point):
        return entry_point
    module_name, _, attr = entry_point.partition(":")
    if not module_name or not attr:
        raise ValueError(f"entry point {entry_point!r} must look like 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"could not import {module_name!r} for entry point {entry_point!r}: {exc} "
            "(the project's envs/ folder must be importable, e.g. run from the repo root)"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


# Envs shipped in the project's envs/ folder.
register(
    "calculator",
    "envs.calculator:CalculatorEnv",
    description="arithmetic word problems with a calculator tool; reward: exact answer",
)
register(
    "code_exec",
    "envs.code_exec:CodeExecEnv",
    description="write a Python function, run code in a sandbox; reward: hidden tests passed",
)
register(
    "sql_mcp",
    "envs.sql_mcp:SqlMcpEnv",
    description="SQL questions through a sandboxed MCP server (mcp-server-sqlite); exact answer",
)
register(
    "frozen_lake",
    "envs.frozen_lake:FrozenLakeEnv",
    description="Gymnasium FrozenLake-v1 through the act tool; reward: reached the goal",
)
register(
    "blackjack",
    "forge_agent.env.gym_adapter:GymnasiumAgentEnv",
    description="Gymnasium Blackjack-v1 through the act tool; reward: the game's outcome",
    gym_id="Blackjack-v1",
)

"""Agent environments: the protocol, a registry, env workers, Gymnasium and OpenEnv adapters.

Light to import (no torch, vLLM, gymnasium or openenv); the adapters load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from forge_agent.env.protocol import AgentEnv, Env, EnvFailure, ToolEnv, maybe_await, message_text
from forge_agent.env.registry import (
    EnvSpec,
    env_spec,
    make_env,
    register,
    registered_env_ids,
)
from forge_agent.env.worker import EnvLease, EnvPool, EnvWorker

__all__ = [
    "AgentEnv",
    "AgentGymEnv",
    "Env",
    "EnvFailure",
    "EnvLease",
    "EnvPool",
    "EnvSpec",
    "EnvWorker",
    "GymnasiumAgentEnv",
    "OpenEnvAgentEnv",
    "ToolEnv",
    "env_spec",
    "make_env",
    "maybe_await",
    "message_text",
    "openenv_app",
    "register",
    "register_gymnasium_envs",
    "registered_env_ids",
    "serve_openenv",
]

_LAZY = {
    "AgentGymEnv": "forge_agent.env.gym_adapter",
    "GymnasiumAgentEnv": "forge_agent.env.gym_adapter",
    "register_gymnasium_envs": "forge_agent.env.gym_adapter",
    "OpenEnvAgentEnv": "forge_agent.env.openenv_adapter",
    "openenv_app": "forge_agent.env.openenv_adapter",
    "serve_openenv": "forge_agent.env.openenv_adapter",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

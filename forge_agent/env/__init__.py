"""Agent environments: the protocol and its seam (tasks, demonstrations, corpus), a registry,
env workers, and adapters: Gymnasium, OpenEnv, reasoning-gym (`reasoning_gym:<task>`) and
verifiers (`verifiers:<module>`).

Light to import (no torch, vLLM, gymnasium, openenv, reasoning-gym or verifiers); the adapters
load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from forge_agent.env.config import EnvConfig
from forge_agent.env.protocol import (
    AgentEnv,
    Env,
    EnvFailure,
    SeatEnv,
    ToolEnv,
    env_seats,
    maybe_await,
    message_text,
)
from forge_agent.env.registry import (
    ENTRY_POINT_GROUP,
    EnvSpec,
    env_spec,
    make_env,
    register,
    registered_env_ids,
)
from forge_agent.env.resolved import ResolvedEnv, resolve_env
from forge_agent.env.sources import (
    HOLDOUT_FRACTION,
    Dataset,
    EnvSetupError,
    Split,
    holdout,
    in_eval_split,
)
from forge_agent.env.worker import EnvLease, EnvPool, EnvWorker

__all__ = [
    "ENTRY_POINT_GROUP",
    "HOLDOUT_FRACTION",
    "AgentEnv",
    "AgentGymEnv",
    "Dataset",
    "Env",
    "EnvConfig",
    "EnvFailure",
    "EnvLease",
    "EnvPool",
    "EnvSetupError",
    "EnvSpec",
    "EnvWorker",
    "GymnasiumAgentEnv",
    "OpenEnvAgentEnv",
    "ReasoningGymEnv",
    "ResolvedEnv",
    "SeatEnv",
    "Split",
    "TextArenaEnv",
    "ToolEnv",
    "VerifiersEnv",
    "env_seats",
    "env_spec",
    "holdout",
    "in_eval_split",
    "make_env",
    "maybe_await",
    "message_text",
    "openenv_app",
    "register",
    "register_gymnasium_envs",
    "registered_env_ids",
    "resolve_env",
    "serve_openenv",
]

_LAZY = {
    "AgentGymEnv": "forge_agent.env.gym_adapter",
    "GymnasiumAgentEnv": "forge_agent.env.gym_adapter",
    "register_gymnasium_envs": "forge_agent.env.gym_adapter",
    "OpenEnvAgentEnv": "forge_agent.env.openenv_adapter",
    "openenv_app": "forge_agent.env.openenv_adapter",
    "serve_openenv": "forge_agent.env.openenv_adapter",
    "ReasoningGymEnv": "forge_agent.env.reasoning_gym_env",
    "VerifiersEnv": "forge_agent.env.verifiers_env",
    "TextArenaEnv": "forge_agent.env.textarena_env",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

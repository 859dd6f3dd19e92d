"""Agent environments: the protocol (`protocol`), the config and registry (`config`,
`registry`, `resolved`), tasks (`tasks`, `sources`, `curriculum`), what an env teaches
(`demonstrations`, `corpus`), the env pool and its worker processes (`pool`, `worker_process`,
`remote_pool`), and in `adapters/` other ecosystems' envs: Gymnasium, OpenEnv, MCP servers
(`MCPToolEnv`), reasoning-gym (`reasoning_gym:<task>`), verifiers (`verifiers:<module>`) and
TextArena (`textarena:<game>`).

Light to import (no torch, vLLM, gymnasium, openenv, reasoning-gym or verifiers); the adapters
load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from forge_agent.env.config import EnvConfig
from forge_agent.env.pool import EnvLease, EnvPool, EnvWorker
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
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import (
    HOLDOUT_FRACTION,
    Dataset,
    EnvSetupError,
    Split,
    holdout,
    in_eval_split,
)

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
    "MCPToolEnv",
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
    "serve_openenv",
]

_LAZY = {
    "AgentGymEnv": "forge_agent.env.adapters.agent_gym",
    "GymnasiumAgentEnv": "forge_agent.env.adapters.gymnasium",
    "register_gymnasium_envs": "forge_agent.env.adapters.agent_gym",
    "MCPToolEnv": "forge_agent.env.adapters.mcp",
    "OpenEnvAgentEnv": "forge_agent.env.adapters.openenv",
    "openenv_app": "forge_agent.env.adapters.openenv",
    "serve_openenv": "forge_agent.env.adapters.openenv",
    "ReasoningGymEnv": "forge_agent.env.adapters.reasoning_gym",
    "VerifiersEnv": "forge_agent.env.adapters.verifiers",
    "TextArenaEnv": "forge_agent.env.adapters.textarena",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

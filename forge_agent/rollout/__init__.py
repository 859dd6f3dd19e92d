"""Multi-turn rollouts: rendering, the episode loop and the concurrent engine."""

from forge_agent.rollout.context import ContextConfig
from forge_agent.rollout.engine import (
    EnvSource,
    GenerateFn,
    LocalEnvs,
    RolloutConfig,
    RolloutEngine,
    SessionRouter,
)
from forge_agent.rollout.renderer import ChatRenderer, RendererConfig

__all__ = [
    "ChatRenderer",
    "ContextConfig",
    "EnvSource",
    "GenerateFn",
    "LocalEnvs",
    "RendererConfig",
    "RolloutConfig",
    "RolloutEngine",
    "SessionRouter",
]

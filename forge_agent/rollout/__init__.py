"""Multi-turn rollouts: rendering, the episode loop and the concurrent runner.

`import forge_agent.rollout` loads only the configs; the runner and the renderer (its chat
templates pull in `renderers`) load on first use.
"""

from forge_agent.lazy import lazy_exports
from forge_agent.rollout.config import ContextConfig, RendererConfig, RolloutConfig

__all__ = [
    "ChatRenderer",
    "ContextConfig",
    "EnvSource",
    "GenerateFn",
    "LocalEnvs",
    "RendererConfig",
    "RolloutConfig",
    "RolloutRunner",
    "SessionRouter",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "ChatRenderer": "forge_agent.rollout.renderer",
        "EnvSource": "forge_agent.env.protocol",
        "GenerateFn": "forge_agent.generator.config",
        "LocalEnvs": "forge_agent.env.protocol",
        "RolloutRunner": "forge_agent.rollout.runner",
        "SessionRouter": "forge_agent.rollout.runner",
    },
)

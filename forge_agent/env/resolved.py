"""The run's env, resolved once at setup and handed down as one value.

    env = ResolvedEnv.of(cfg.env)        # the one registry lookup of `cfg.env.id`
    tasks = Curriculum(env)              # the training task stream
    held_out = eval_tasks(env, 64)       # the evaluation tasks
    pool = EnvPool(env, size=8)          # the env workers (they get `env.spec`, pickled)
    engines = await build_engines(cfg, env, ...)

Consumers that take an `EnvConfig` (or an env id) take a `ResolvedEnv` too, through
`resolve_env`: given a `ResolvedEnv` it looks nothing up, so the loop, evaluation, the benches
and the env workers of one run share one resolution of the id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from forge_agent.env.config import EnvConfig
from forge_agent.env.protocol import AgentEnv
from forge_agent.env.registry import EnvSpec, env_spec

__all__ = ["ResolvedEnv", "resolve_env"]


@dataclass(frozen=True)
class ResolvedEnv:
    """An `EnvConfig` with its `EnvSpec`: which env to build and how (`forge_agent.env.registry`
    resolves the id, once, in `of`)."""

    config: EnvConfig
    spec: EnvSpec

    @classmethod
    def of(cls, env: EnvConfig | str) -> ResolvedEnv:
        """Resolve `env` (an env id alone: no kwargs, default deadlines); an unknown id raises
        `UnknownEnvError` naming the ids that exist."""
        config = EnvConfig(env, kwargs={}) if isinstance(env, str) else env
        return cls(config, env_spec(config.id))

    @property
    def id(self) -> str:
        return self.config.id

    def factory(self) -> Callable[..., AgentEnv]:
        """The env class (or factory), imported on first use (`EnvSpec.factory`)."""
        return self.spec.factory()

    def make(self, **overrides: Any) -> AgentEnv:
        """A new env instance of `config.kwargs`, `overrides` over them."""
        return self.spec.make(**{**self.config.kwargs, **overrides})

    def with_kwargs(self, kwargs: Mapping[str, Any]) -> ResolvedEnv:
        """The same env built with other constructor arguments (a curriculum level)."""
        return ResolvedEnv(dataclasses.replace(self.config, kwargs=dict(kwargs)), self.spec)


def resolve_env(env: ResolvedEnv | EnvConfig | str) -> ResolvedEnv:
    """`env` itself when it is resolved, else `ResolvedEnv.of(env)`."""
    return env if isinstance(env, ResolvedEnv) else ResolvedEnv.of(env)

"""The run's env, resolved once at setup and handed down as one value.

    env = ResolvedEnv.of(cfg.env)        # the one registry lookup of `cfg.env.id`
    tasks = Curriculum(env)              # the training task stream
    held_out = eval_tasks(env, 64)       # the evaluation tasks
    pool = EnvPool(env, size=8)          # the env workers (they get `env.spec`, pickled)
    runners = await build_runners(cfg, env, ...)

`ResolvedEnv` is the only env type the library's env functions take (tasks, curriculum,
demonstrations, the corpus, the env pool, the warm start): the id is looked up once, where the
env is named (the driver, `apps/eval`, a bench, a test), and never again below it. An env that
names another env (an agent program's `tasks_from`, an env's `demonstrations_origin()`) is
resolved once, where that name is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from forge_agent.env.config import EnvConfig
from forge_agent.env.protocol import AgentEnv
from forge_agent.env.registry import EnvSpec, env_spec

__all__ = ["ResolvedEnv"]


@dataclass(frozen=True)
class ResolvedEnv:
    """An `EnvConfig` with its `EnvSpec`: which env to build and how (`forge_agent.env.registry`
    resolves the id, once, in `of`)."""

    config: EnvConfig
    spec: EnvSpec

    @classmethod
    def of(cls, env: EnvConfig | str, **config: Any) -> ResolvedEnv:
        """Resolve `env`: an `EnvConfig`, or an env id with `EnvConfig` fields as keywords
        (`ResolvedEnv.of("calculator", kwargs={"difficulty": 2})`; no kwargs unless given).
        An unknown id raises `UnknownEnvError` naming the ids that exist."""
        if isinstance(env, str):
            env = EnvConfig(env, **{"kwargs": {}, **config})
        elif not isinstance(env, EnvConfig):
            raise TypeError(f"ResolvedEnv.of takes an EnvConfig or an env id, not {env!r}")
        elif config:
            env = dataclasses.replace(env, **config)
        return cls(env, env_spec(env.id))

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def kwargs(self) -> dict[str, Any]:
        """The env's constructor arguments (`config.kwargs`)."""
        return self.config.kwargs

    def factory(self) -> Callable[..., AgentEnv]:
        """The env class (or factory), imported on first use (`EnvSpec.factory`)."""
        return self.spec.factory()

    def make(self, **overrides: Any) -> AgentEnv:
        """A new env instance of `config.kwargs`, `overrides` over them."""
        return self.spec.make(**{**self.config.kwargs, **overrides})

    def with_kwargs(self, kwargs: Mapping[str, Any]) -> ResolvedEnv:
        """The same env built with other constructor arguments (a curriculum level)."""
        return ResolvedEnv(dataclasses.replace(self.config, kwargs=dict(kwargs)), self.spec)

"""Env ids -> env factories: `register(...)`, entry points, `"module:Name"` and OpenEnv URLs.

An env id resolves, in this order, to:
1. an env registered in this process with `register(env_id, entry_point, **kwargs)`;
2. an entry point of the `forge_agent.envs` group in any installed package's metadata
   (`[project.entry-points."forge_agent.envs"] my_env = "my_pkg.envs:MyEnv"`): how the
   project's own envs register, and how a user's package makes its envs known everywhere,
   env worker processes included, without editing forge-agent;
3. `"package.module:Name"` itself;
4. an OpenEnv server's URL (`http://host:port`), played through `OpenEnvAgentEnv`;
5. `"reasoning_gym:<task>"` / `"verifiers:<module>"` / `"textarena:<game>"`: an environment of
   those ecosystems (`ECOSYSTEMS`), through its adapter in `forge_agent.env.adapters`.

An entry point is a callable or a `"package.module:Name"` string imported on first use, so
registering an env costs nothing and env workers can rebuild it in another process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from forge_agent.env.protocol import AgentEnv
from forge_agent.env.sources import EnvSetupError

__all__ = [
    "ENTRY_POINT_GROUP",
    "EnvSpec",
    "UnknownEnvError",
    "env_spec",
    "load_entry_point",
    "make_env",
    "refresh_entry_points",
    "register",
    "registered_env_ids",
]


class UnknownEnvError(EnvSetupError, KeyError):
    """An env id that no registry, entry point, module path or URL names (a `KeyError` too,
    as a lookup that failed)."""

    __str__ = EnvSetupError.__str__  # KeyError's would quote the whole message


ENTRY_POINT_GROUP = "forge_agent.envs"
"""The Python entry-point group packages declare their envs in."""


@dataclass(frozen=True)
class EnvSpec:
    """How to build one kind of env: an entry point plus default keyword arguments."""

    env_id: str
    entry_point: str | Callable[..., AgentEnv]
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def factory(self) -> Callable[..., AgentEnv]:
        """The env class (or factory), imported on first use; an import failure names the
        env id and the entry point."""
        try:
            return load_entry_point(self.entry_point)
        except (ImportError, AttributeError, ValueError) as exc:
            raise EnvSetupError(
                self.env_id, f"entry point {self.entry_point!r}", f"does not import: {exc}"
            ) from exc
        except Exception as exc:  # the env's module raised while importing (SyntaxError, ...)
            raise EnvSetupError(
                self.env_id,
                f"entry point {self.entry_point!r}",
                f"its module raised while importing: {type(exc).__name__}: {exc}",
            ) from exc

    def make(self, **kwargs: Any) -> AgentEnv:
        """A new env instance; `kwargs` override the spec's defaults."""
        return self.factory()(**{**self.kwargs, **kwargs})


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


@lru_cache(maxsize=1)
def _entry_point_specs() -> dict[str, EnvSpec]:
    """Envs that installed packages declare in the `forge_agent.envs` entry-point group."""
    return {
        ep.name: EnvSpec(ep.name, ep.value, description=f"entry point of {_dist_name(ep)}")
        for ep in entry_points(group=ENTRY_POINT_GROUP)
    }


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "an installed package"


def refresh_entry_points() -> None:
    """Read the installed packages' entry points again (after installing one at run time)."""
    _entry_point_specs.cache_clear()


def registered_env_ids() -> list[str]:
    """Ids of envs registered in this process or declared by installed packages."""
    return sorted({*_REGISTRY, *_entry_point_specs()})


AGENT_PREFIX = "agent:"
"""Env ids of agent programs: "agent:package.module:fn"."""


ECOSYSTEMS: dict[str, tuple[str, str]] = {
    "reasoning_gym": ("forge_agent.env.adapters.reasoning_gym:ReasoningGymEnv", "task"),
    "verifiers": ("forge_agent.env.adapters.verifiers:VerifiersEnv", "module"),
    "textarena": ("forge_agent.env.adapters.textarena:TextArenaEnv", "game"),
    "gymnasium": ("forge_agent.env.adapters.gymnasium:GymnasiumIdEnv", "gym_id"),
}
"""Id prefix -> (the adapter's entry point, the argument the rest of the id fills)."""


def is_agent_program(env_id: str) -> bool:
    """`env_id` names an agent program on the openai client, not an env class."""
    return env_id.startswith(AGENT_PREFIX)


def env_spec(env_id: str) -> EnvSpec:
    """The spec of `env_id` (see the module docstring for how ids resolve)."""
    if env_id in _REGISTRY:
        return _REGISTRY[env_id]
    declared = _entry_point_specs()
    if env_id in declared:
        return declared[env_id]
    if env_id.startswith(("http://", "https://")):
        return EnvSpec(
            env_id, "forge_agent.env.adapters.openenv:OpenEnvAgentEnv", {"base_url": env_id}
        )
    if is_agent_program(env_id):  # an agent program on the openai client (docs/agents.md)
        program = env_id.removeprefix(AGENT_PREFIX)
        return EnvSpec(
            env_id, "forge_agent.env.adapters.agent_program:AgentProgramEnv", {"program": program}
        )
    prefix, _, name = env_id.partition(":")
    if prefix in ECOSYSTEMS:
        entry_point, argument = ECOSYSTEMS[prefix]
        return EnvSpec(env_id, entry_point, {argument: name})
    if ":" in env_id:
        return EnvSpec(env_id, env_id)
    raise UnknownEnvError(
        env_id,
        "env.id",
        f"unknown env id; registered ids: {', '.join(registered_env_ids())} (or pass a "
        "'package.module:Factory' entry point, an OpenEnv server's http:// URL, "
        "'reasoning_gym:<task>', 'verifiers:<module>', 'textarena:<game>' or 'gymnasium:<id>')",
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
            f"could not import {module_name!r} for entry point {entry_point!r}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(
                f"module {module_name!r} has no attribute {attr!r} (entry point {entry_point!r})"
            ) from None
    return obj

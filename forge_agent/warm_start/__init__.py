"""Supervised warm start on generated demonstrations, before RL.

A randomly initialised tiny model never emits a well-formed tool call, so RL would see reward 0
everywhere and learn nothing. A short supervised pass on a mix of demonstrations fixes that:
some call the tool and answer with its result (correct), the rest answer at once with a guess
(mostly wrong). The warm start is honest and imperfect on purpose: the RL phase has to find
that calling the tool pays.

    policy = policy_model(base, env, ws, rollout)  # `base` warm-started (cached) when enabled

Its parts: `config` (`WarmStartConfig`, light: the run's config imports it without torch or a
tokenizer), `demos` (demonstrations rendered exactly as a rollout would see them), `cache_key`
(what keys a cached warm start) and `sft` (the supervised pass, `policy_model`). Importing the
package loads only the config; the rest loads on first use.
"""

from forge_agent.lazy import lazy_exports
from forge_agent.warm_start.config import WarmEnvs, WarmStartConfig

__all__ = [
    "DEMO_LENGTHS_FILE",
    "KEY_DEMONSTRATIONS",
    "KEY_FILE",
    "TOKENIZER_FILES",
    "WarmEnvs",
    "WarmStartConfig",
    "demo_fit_warnings",
    "demo_lengths",
    "demo_trajectory",
    "demonstration_source",
    "demonstration_trajectories",
    "demonstrations",
    "describe_key",
    "estimate_line",
    "policy_model",
    "warm_start",
    "warm_start_dir",
    "warm_start_key",
]

_DEMOS = "forge_agent.warm_start.demos"
_KEY = "forge_agent.warm_start.cache_key"
_SFT = "forge_agent.warm_start.sft"
__getattr__ = lazy_exports(
    __name__,
    {
        "DEMO_LENGTHS_FILE": _DEMOS,
        "demo_fit_warnings": _DEMOS,
        "demo_lengths": _DEMOS,
        "demo_trajectory": _DEMOS,
        "demonstration_source": _DEMOS,
        "demonstrations": _DEMOS,
        "KEY_DEMONSTRATIONS": _KEY,
        "KEY_FILE": _KEY,
        "TOKENIZER_FILES": _KEY,
        "describe_key": _KEY,
        "warm_start_dir": _KEY,
        "warm_start_key": _KEY,
        "demonstration_trajectories": _SFT,
        "estimate_line": _SFT,
        "policy_model": _SFT,
        "warm_start": _SFT,
    },
)

"""The warm start's cache key: everything that shapes a warm-started model (the base model and
its tokenizer, the settings, and per env its kwargs, its source and a sample of its
demonstrations), so a later run with the same inputs reuses it and a change to any of them
warm-starts afresh."""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from forge_agent.env.demonstrations import demonstrations_of, demonstrations_origin
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.warm_start.config import WarmEnvs, WarmStartConfig

__all__ = [
    "KEY_DEMONSTRATIONS",
    "KEY_FILE",
    "TOKENIZER_FILES",
    "describe_key",
    "dir_of",
    "warm_start_dir",
    "warm_start_key",
]


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "chat_template.jinja",
)
"""The files of a model folder that make its tokenizer and chat template (hashed into the key)."""

KEY_DEMONSTRATIONS = 4
"""Demonstrations of each env generated to key the cache: a change to what `demonstrations()`
gives (its code, its data) changes the key. A hook that is not deterministic in its seed
changes it on every run (and so warm-starts afresh every run)."""

KEY_FILE = "warm_start_key.json"
"""Written into a warm-start folder: what its cache key was made of (see `warm_start_key`)."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def _tokenizer_digest(model_path: Path) -> str:
    """A digest of the tokenizer files in `model_path` (those it has)."""
    h = hashlib.sha256()
    for name in TOKENIZER_FILES:
        if (model_path / name).is_file():
            h.update(name.encode() + b"\0" + (model_path / name).read_bytes())
    return h.hexdigest()[:12]


def _source_digest(env: ResolvedEnv) -> str:
    """A digest of the source files of `env`'s class and of its `demonstrations` method."""
    factory = env.factory()
    files = set()
    for obj in (factory, getattr(factory, "demonstrations", None)):
        try:
            files.add(inspect.getsourcefile(inspect.unwrap(obj)))  # type: ignore[arg-type]
        except TypeError:  # a builtin, or None
            continue
    h = hashlib.sha256()
    for name in sorted(f for f in files if f and Path(f).is_file()):
        h.update(Path(name).read_bytes())
    return h.hexdigest()[:12]


def _env_key(env: ResolvedEnv, cfg: WarmStartConfig) -> dict[str, Any]:
    """What of one env (id, kwargs) shapes its demonstrations: the kwargs, the env's source and
    a digest of the first `KEY_DEMONSTRATIONS` demonstrations it gives at `cfg`'s seed."""
    sample = demonstrations_of(env, KEY_DEMONSTRATIONS, cfg.seed, cfg.demo_fraction)
    text = json.dumps(sample, sort_keys=True, default=str)
    return {
        "kwargs": dict(env.kwargs),
        "source": _source_digest(env),
        "demonstrations": _digest(text.encode()),
    }


def warm_start_key(model_path: str | Path, envs: WarmEnvs, cfg: WarmStartConfig) -> dict[str, Any]:
    """Everything that shapes the warm start of `model_path` on `envs`: the model folder, its
    tokenizer (a digest of its files), the settings `cfg`, and per env (keyed by the env each
    demonstration comes from, `demonstrations_origin`: an OpenEnv URL by the env its server
    serves, an agent program by its `tasks_from` env) its kwargs, a digest of its source and
    one of a sample of its demonstrations."""
    origins: dict[str, Any] = {}
    for item in envs:
        if isinstance(item, list):  # a ladder's levels
            levels = [demonstrations_origin(level) for level in item]
            origins[levels[0].id] = [_env_key(level, cfg) for level in levels]
        else:
            origin = demonstrations_origin(item)
            origins[origin.id] = _env_key(origin, cfg)
    model_path = Path(model_path)
    key = {
        "model": str(model_path.resolve()),
        "tokenizer": _tokenizer_digest(model_path),
        "envs": origins,
        "warm_start": asdict(cfg),
    }
    built = min(cfg.num_demos, cfg.steps * cfg.batch_size)  # sft.demos_needed
    if built < cfg.num_demos:  # fewer than num_demos built (a key of before is unchanged)
        key["demos_built"] = built
    return key


def warm_start_dir(
    model_path: str | Path, envs: WarmEnvs, cfg: WarmStartConfig, cache_dir: str | Path
) -> Path:
    """The cached warm start of `model_path` on `envs` under `cache_dir`, keyed by
    `warm_start_key` (the model, its tokenizer, `cfg`, each env's kwargs, source and
    demonstrations)."""
    return dir_of(Path(model_path), warm_start_key(model_path, envs, cfg), cache_dir)


def dir_of(model_path: Path, key: dict[str, Any], cache_dir: str | Path) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    names = "+".join(re.sub(r"[^\w.:+-]", "_", env_id) for env_id in sorted(key["envs"]))
    return Path(cache_dir) / f"warm-{model_path.name}-{names}-{digest}"


def describe_key(key: dict[str, Any]) -> str:
    """One line of what a warm start was keyed on."""
    envs = []
    for env_id, parts in key["envs"].items():
        first = parts[0] if isinstance(parts, list) and parts else parts
        if isinstance(first, dict):
            envs.append(
                f"{env_id} (source {first['source']}, demonstrations {first['demonstrations']})"
            )
        else:
            envs.append(env_id)
    settings = ", ".join(f"{k}={v}" for k, v in key["warm_start"].items() if k != "enabled")
    context = key.get("context") or {}
    cut = ", ".join(f"rollout.{k}={v}" for k, v in context.items() if v is not None)
    return (
        f"model {key['model']} (tokenizer {key['tokenizer']}), env {'; '.join(envs)}, "
        f"warm_start {settings}" + (f", demonstrations cut to {cut}" if cut else "")
    )

"""Supervised warm start on generated demonstrations, before RL.

A randomly initialised tiny model never emits a well-formed tool call, so RL would see reward 0
everywhere and learn nothing. A short supervised pass on a mix of demonstrations fixes that:
some call the tool and answer with its result (correct), the rest answer at once with a guess
(mostly wrong). The warm start is honest and imperfect on purpose: the RL phase has to find
that calling the tool pays.

Demonstrations are rendered exactly as a rollout would see them (full render of the prompt,
each assistant turn as the tokens the policy would sample, `bridge_to_next_turn` for tool
results), so the loss mask covers exactly the assistant's sampled tokens.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import random
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forge_agent.env.demonstrations import (
    demonstrations_of,
    demonstrations_origin,
    schema_demonstrations,
)
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import EnvSetupError
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.history import TokenHistory
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.tools.schema import ToolSchemaError
from forge_agent.types import Message, ToolSpec, Trajectory

logger = logging.getLogger(__name__)


@dataclass
class WarmStartConfig:
    """Supervised warm start on the env's demonstrations, so RL starts from non-zero reward.

    Every field is part of the cache key of the warm-started model (see `warm_start`).
    """

    enabled: bool = True
    steps: int = 300
    batch_size: int = 32
    lr: float = 1e-3
    demo_fraction: float = 0.5  # share of demonstrations that use the tool; the rest guess
    num_demos: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        from forge_agent.typed_config import check_field

        check_field(self.steps >= 0, "steps", self.steps, "an int >= 0")
        check_field(self.batch_size >= 1, "batch_size", self.batch_size, "an int >= 1")
        check_field(self.lr > 0.0, "lr", self.lr, "a float > 0")
        check_field(
            0.0 <= self.demo_fraction <= 1.0,
            "demo_fraction",
            self.demo_fraction,
            "a fraction in [0, 1]",
        )
        check_field(self.num_demos >= 1, "num_demos", self.num_demos, "an int >= 1")


def demo_trajectory(
    renderer: ChatRenderer, messages: list[Message], tools: list[ToolSpec], task_id: str = "demo"
) -> Trajectory:
    """Token ids and loss mask of a whole conversation, as the policy would have produced it
    (written through the rollouts' token history: assistant turns are mask 1, version 0)."""
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    traj = Trajectory(task_id=task_id, group_id=task_id, messages=list(messages))
    history = TokenHistory(traj)
    history.start_segment(renderer.render_prompt(messages[:first], tools))
    i = first
    while i < len(messages):
        completion = _assistant_tokens(renderer, history.prompt, messages[: i + 1], tools, task_id)
        history.record_turn(completion, [0.0] * len(completion), [0] * len(completion))
        j = i + 1
        while j < len(messages) and messages[j]["role"] != "assistant":
            j += 1
        if j >= len(messages):
            break
        bridged = history.bridge(renderer, messages[i + 1 : j], tools)
        if bridged is None:
            raise ValueError(f"could not bridge demonstration {task_id!r} append-only")
        history.extend_to(bridged)
        i = j
    return traj


def _assistant_tokens(
    renderer: ChatRenderer,
    context: list[int],
    messages: list[Message],
    tools: list[ToolSpec],
    task_id: str,
) -> list[int]:
    """The last assistant message as the policy would sample it after `context`: its text
    tokenized on its own (a full render may merge tokens across the prompt boundary), through
    the turn's stop token."""
    tok = renderer.tokenizer
    full_text = tok.decode(renderer.render_full(messages, tools))
    prefix = tok.decode(context)
    if not full_text.startswith(prefix):
        raise ValueError(f"renderer is not prefix-stable on demonstration {task_id!r}")
    completion = tok.encode(full_text[len(prefix) :], add_special_tokens=False)
    stop = next((k for k, t in enumerate(completion) if t in renderer.stop_token_ids), None)
    return completion if stop is None else completion[: stop + 1]


def demonstrations(
    env: ResolvedEnv, n: int, demo_fraction: float, seed: int
) -> tuple[list[list[Message]], list[ToolSpec]]:
    """`n` conversations of `env` from the env's `demonstrations(n, seed, demo_fraction)`
    hook, and the tool specs they were written against.

    Raises `EnvSetupError` when the env has none (`has_demonstrations` checks first).
    """
    convos = demonstrations_of(env, n, seed, demo_fraction)
    if not convos:  # an env without demonstrations: calls sampled from its tool schemas
        convos = schema_demonstrations(env, n, seed)
    if not convos:
        raise EnvSetupError(
            env.id,
            "its demonstrations()",
            "no demonstrations for the warm start and no tools to build them from (give the "
            "env class a `demonstrations(n, seed, demo_fraction)` method, or set "
            "warm_start.enabled=false)",
        )
    return [messages for messages, _ in convos], convos[0][1]


def demonstration_source(env: ResolvedEnv) -> str | None:
    """Where `env`'s warm start comes from: "demonstrations" (the env's own, or for an
    agent program those of its `tasks_from` env), "tool schemas" (`schema_demonstrations`:
    calls sampled from the env's tool schemas, for an env without demonstrations), or None
    (no demonstrations and no tools: the warm start is skipped)."""
    try:
        if demonstrations_of(env, 1, 0, 0.5):
            return "demonstrations"
        if schema_demonstrations(env, 1, 0):
            return "tool schemas"
    except EnvSetupError:
        raise
    except ToolSchemaError as exc:  # the env's tools, not its demonstrations(), are at fault
        raise EnvSetupError(env.id, "its tools", str(exc)) from exc
    except Exception as exc:  # a broken hook must not quietly skip the warm start
        raise EnvSetupError(
            env.id,
            "its demonstrations() (or a reset for demonstrations from its tool schemas)",
            f"raised {type(exc).__name__}: {exc!r} (fix the env, or set warm_start.enabled=false)",
        ) from exc
    return None


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

WarmEnvs = Sequence[ResolvedEnv | list[ResolvedEnv]]
"""What a warm start demonstrates: envs, each alone or as a list (a ladder's levels, keyed
together under the env's id)."""

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
    return {
        "model": str(model_path.resolve()),
        "tokenizer": _tokenizer_digest(model_path),
        "envs": origins,
        "warm_start": asdict(cfg),
    }


def warm_start_dir(
    model_path: str | Path, envs: WarmEnvs, cfg: WarmStartConfig, cache_dir: str | Path
) -> Path:
    """The cached warm start of `model_path` on `envs` under `cache_dir`, keyed by
    `warm_start_key` (the model, its tokenizer, `cfg`, each env's kwargs, source and
    demonstrations)."""
    return _dir_of(Path(model_path), warm_start_key(model_path, envs, cfg), cache_dir)


def _dir_of(model_path: Path, key: dict[str, Any], cache_dir: str | Path) -> Path:
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
    return (
        f"model {key['model']} (tokenizer {key['tokenizer']}), env {'; '.join(envs)}, "
        f"warm_start {settings}"
    )


def warm_start(
    model_path: str | Path,
    envs: WarmEnvs,
    cfg: WarmStartConfig,
    cache_dir: str | Path | None = None,
    device: str = "auto",
    autocast: str | None = None,
) -> Path:
    """SFT `model_path` on demonstrations of `envs` (resolved envs, or lists of them such as a
    ladder's levels; demonstrations split evenly over every env and kwargs);
    returns the new model folder. `autocast`: the trainer's mixed precision (`trainer.autocast`).

    The result is cached under a key of the inputs, so a second run reuses it.
    """
    from forge_agent.models.tiny import default_cache_dir, load_tokenizer
    from forge_agent.trainer.core import Trainer, TrainerConfig

    model_path = Path(model_path)
    key = warm_start_key(model_path, envs, cfg)
    if autocast is not None:
        key["autocast"] = autocast
    out = _dir_of(model_path, key, cache_dir or default_cache_dir())
    if (out / "config.json").exists():
        print(f"[warm start] using the cached warm start {out}, keyed on {describe_key(key)}")
        return out

    tokenizer = load_tokenizer(model_path)
    demos = demonstration_trajectories(ChatRenderer(tokenizer), envs, cfg)
    # Short rows: on CPU, sdpa pays for the dense block-diagonal mask of a packed row
    # quadratically, so rows of a few episodes beat long rows (apps/bench/train_step.py).
    trainer = Trainer(
        TrainerConfig(lr=cfg.lr, row_tokens=512, autocast=autocast),
        str(model_path),
        device=device,
        seed=cfg.seed,
    )
    rng = random.Random(cfg.seed)
    print(
        f"[warm start] {cfg.steps} supervised steps on {len(demos)} demonstrations of "
        f"{', '.join(sorted(key['envs']))} (cached: a later run with the same settings skips it)",
        flush=True,
    )
    started = time.monotonic()
    every = max(1, cfg.steps // 10)
    for step in range(1, cfg.steps + 1):
        metrics = trainer.sft_step(rng.sample(demos, min(cfg.batch_size, len(demos))))
        if step == ESTIMATE_AFTER_STEPS and (
            line := estimate_line(step, time.monotonic() - started, cfg.steps)
        ):
            print(line, flush=True)
        if step % every == 0 or step == cfg.steps:
            elapsed = time.monotonic() - started
            rate = step / elapsed
            print(
                f"[warm start] step {step}/{cfg.steps} loss {metrics['loss/total']:.3f}"
                f" | {rate:.2f} steps/s | eta {(cfg.steps - step) / rate:.0f}s",
                flush=True,
            )
    tmp = out.with_name(out.name + f".tmp{time.time_ns()}")
    trainer.model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / DEMO_LENGTHS_FILE).write_text(json.dumps(demo_lengths(demos)))
    (tmp / KEY_FILE).write_text(json.dumps(key, indent=1, sort_keys=True))
    try:
        tmp.rename(out)
    except OSError:
        if not (out / "config.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def demonstration_trajectories(
    renderer: ChatRenderer, envs: WarmEnvs, cfg: WarmStartConfig
) -> list[Trajectory]:
    """`cfg.num_demos` demonstrations split evenly over every env and kwargs of `envs`, as
    trajectories; those of one env and kwargs form one group, so the trainer computes their
    common prompt (the system prompt and tool specs) once per packed row (`share_prefix`)."""
    sources = [env for item in envs for env in (item if isinstance(item, list) else [item])]
    demos = []
    for k, env in enumerate(sources):
        n = cfg.num_demos // len(sources)
        convos, tools = demonstrations(env, n, cfg.demo_fraction, cfg.seed)
        for i, convo in enumerate(convos):
            demo = demo_trajectory(renderer, convo, tools, f"{env.id}-{k}-{i}")
            demo.group_id = f"{env.id}-{k}"
            demos.append(demo)
    return demos


ESTIMATE_AFTER_STEPS = 3
"""Steps timed before the warm start estimates how long it takes (`estimate_line`)."""


def estimate_line(step: int, elapsed_s: float, steps: int) -> str | None:
    """The console line that says how long a warm start will take, from the `elapsed_s` its
    first `step` steps took; None when the whole takes under a minute."""
    total = elapsed_s / step * steps
    if total < 60:
        return None
    return (
        f"[warm start] about {total / 60:.0f} min for {steps} steps ({elapsed_s / step:.1f} s a "
        "step); cached after, and warm_start.steps sets how many"
    )


DEMO_LENGTHS_FILE = "demonstration_lengths.json"
"""Written into a warm-start folder: the longest demonstrated turn and episode, in tokens."""


def demo_lengths(demos: list[Trajectory]) -> dict[str, int]:
    """The longest assistant turn (a run of loss tokens, its stop token included) and the
    longest whole episode of the demonstrations, in tokens."""
    turn = episode = 0
    for traj in demos:
        episode = max(episode, len(traj.token_ids))
        run = 0
        for m in traj.loss_mask:
            run = run + 1 if m else 0
            turn = max(turn, run)
    return {"turn_tokens": turn, "episode_tokens": episode}


def demo_fit_warnings(policy: Path, rollout: RolloutConfig) -> list[str]:
    """What of the warm start's demonstrations the rollout limits cut off: a turn longer than
    `rollout.max_new_tokens_per_turn` or an episode longer than `rollout.max_total_tokens`
    (the policy is taught calls it is then never let finish: they end `truncated_length` and
    RL sees only the episodes that skip them; with a `rollout.context` strategy an episode is
    compacted, not cut). [] when they fit or the folder predates the record."""
    path = Path(policy) / DEMO_LENGTHS_FILE
    if not path.exists():
        return []
    lengths = json.loads(path.read_text())
    out = []
    for key, measured, what in (
        ("max_new_tokens_per_turn", lengths["turn_tokens"], "turn"),
        ("max_total_tokens", lengths["episode_tokens"], "episode"),
    ):
        limit = getattr(rollout, key)
        if key == "max_total_tokens" and rollout.context.strategy != "keep":
            continue  # a context strategy compacts an episode past the limit instead of cutting
        if measured > limit:
            out.append(
                f"rollout.{key}={limit} is shorter than the warm start's longest demonstrated "
                f"{what} ({measured} tokens): the policy's {what}s like it will be cut off "
                f"(truncated_length); set rollout.{key}={measured} or more"
            )
    return out


def policy_model(cfg: Any, env: ResolvedEnv) -> Path:
    """The policy folder an `AgentConfig` starts from: the tiny model (built here) or
    `model.name` (a folder or a hub name in the local HF cache), after the warm start when
    `warm_start.enabled` (cached). `env`: `cfg.env` as the driver resolved it. The warm start
    demonstrates `env.kwargs`; with a
    difficulty ladder, every level of it (demonstrations split evenly), so that RL finds a
    reward signal at each level it climbs to (warm-started on the first level only, the
    calculator earned nothing at difficulty 2 and the ladder stalled there)."""
    from forge_agent.models.hub import resolve_model
    from forge_agent.models.tiny import ensure_tiny_model, refresh_chat_template

    if cfg.model.name == "tiny":
        base = ensure_tiny_model(cfg.model.tiny_config())
    else:
        base = resolve_model(cfg.model.name, dtype=cfg.model.storage_dtype)
    ws = cfg.warm_start
    if not ws.enabled or ws.steps <= 0:
        return base
    ladder = env.config.curriculum
    levels = [env.with_kwargs({**env.kwargs, ladder.kwarg: v}) for v in ladder.levels]
    levels = levels if ladder.ladder else []
    source = demonstration_source(levels[0] if levels else env)
    if source is None:
        logger.warning(
            "warm start skipped: env %r has no demonstrations() and no tools (RL starts from %s)",
            env.id,
            base,
        )
        return base
    if source == "tool schemas":
        print(
            f"[warm start] env {env.id!r} has no demonstrations(): the warm start teaches "
            "the call format with calls sampled from its tool schemas",
            flush=True,
        )
    policy = warm_start(base, [levels or env], ws, device=cfg.device, autocast=cfg.trainer.autocast)
    if cfg.model.name == "tiny":
        refresh_chat_template(policy)  # warm starts cached before a template fix
    for warning in demo_fit_warnings(policy, cfg.rollout):
        print(f"[warm start] warning: {warning}", flush=True)
    return policy

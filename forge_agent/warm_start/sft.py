"""The warm start's supervised pass, before RL (the package's overview: `forge_agent.warm_start`).

A randomly initialised tiny model never emits a well-formed tool call, so RL would see reward 0
everywhere and learn nothing. A short supervised pass on a mix of demonstrations fixes that:
some call the tool and answer with its result (correct), the rest answer at once with a guess
(mostly wrong). The warm start is honest and imperfect on purpose: the RL phase has to find
that calling the tool pays.

Demonstrations are rendered exactly as a rollout would see them (`warm_start.demos`); the
result is cached under a key of everything that shapes it (`warm_start.cache_key`); the
settings are `warm_start.config.WarmStartConfig`.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.models.tiny import default_cache_dir, load_tokenizer, refresh_chat_template
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.trainer.precision import announce_autocast
from forge_agent.types import Trajectory
from forge_agent.warm_start.cache_key import (
    KEY_FILE,
    describe_key,
    dir_of,
    warm_start_key,
)
from forge_agent.warm_start.config import DemoCap, WarmEnvs, WarmStartConfig
from forge_agent.warm_start.demos import (
    DEMO_LENGTHS_FILE,
    TurnWriter,
    cap_cuts,
    demo_fit_warnings,
    demo_lengths,
    demo_trajectory,
    demonstration_source,
    demonstrations,
)

__all__ = ["demonstration_trajectories", "estimate_line", "policy_model", "warm_start"]

logger = logging.getLogger(__name__)


def warm_start(
    model_path: str | Path,
    envs: WarmEnvs,
    cfg: WarmStartConfig,
    cache_dir: str | Path | None = None,
    device: str = "auto",
    autocast: str | None = None,
    cap: DemoCap | None = None,
) -> Path:
    """SFT `model_path` on demonstrations of `envs` (resolved envs, or lists of them such as a
    ladder's levels; demonstrations split evenly over every env and kwargs);
    returns the new model folder. `autocast`: the trainer's mixed precision (`trainer.autocast`).
    `cap`: the run's episode limits, which each demonstration is cut to (`DemoCap`).

    The result is cached under a key of the inputs, so a second run reuses it. Demonstrations
    that no limit of `cap` cut are keyed as they were before the cap existed (a cached warm
    start stays valid where the cap changes none of its tokens: `cached_warm_start`); cut ones
    add the cap to the key (`"context"`).
    """
    # imported here: torch and transformers: +1.6 s at import, measured; a cached warm start needs
    # neither
    from forge_agent.trainer.core import Trainer, TrainerConfig

    model_path = Path(model_path)
    key = warm_start_key(model_path, envs, cfg)
    if autocast == "auto":  # keyed on what it runs as: bf16 or fp32 on this device
        autocast = announce_autocast(autocast, device, "warm start")
    if autocast is not None:
        key["autocast"] = autocast
    cache = Path(cache_dir or default_cache_dir())
    cut_key = {**key, "context": cap.key()} if cap is not None else key
    cached = cached_warm_start(model_path, envs, cfg, cap, (key, cut_key), cache)
    if cached is not None:
        out, used = cached
        print(f"[warm start] using the cached warm start {out}, keyed on {describe_key(used)}")
        return out

    tokenizer = load_tokenizer(model_path)
    demos = demonstration_trajectories(ChatRenderer(tokenizer), envs, cfg, cap)
    if any(d.info.get("demo_cut") for d in demos):
        key = cut_key
    out = dir_of(model_path, key, cache)
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
    return _save(out, trainer.model, tokenizer, demos, key)


def _save(out: Path, model: Any, tokenizer: Any, demos: list[Trajectory], key: dict) -> Path:
    """The warm-started `model` and its `tokenizer` written to `out` (through a temporary
    folder renamed into place: a concurrent run that got there first wins), with the
    demonstrations' lengths and the cache key it was made under."""
    tmp = out.with_name(out.name + f".tmp{time.time_ns()}")
    model.save_pretrained(tmp, safe_serialization=True)
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


def cached_warm_start(
    model_path: Path,
    envs: WarmEnvs,
    cfg: WarmStartConfig,
    cap: DemoCap | None,
    keys: tuple[dict[str, Any], dict[str, Any]],
    cache: Path,
) -> tuple[Path, dict[str, Any]] | None:
    """The cached warm start a run with `cap` may use, and its key: the one keyed with the
    cap (`keys[1]`: its demonstrations were cut to it), else the one keyed without
    (`keys[0]`: demonstrations no cap cut) when `cap` would cut none of its demonstrations
    either: its longest episode (its `demonstration_lengths.json`) fits
    `max_total_tokens`, and its conversations (generated again: no rendering) fit
    `max_turns` and `tool_output_tokens` (`cap_cuts`). None: nothing cached fits."""
    whole, cut = (dir_of(model_path, k, cache) for k in keys)
    if cap is not None and (cut / "config.json").exists():
        return cut, keys[1]
    if not (whole / "config.json").exists():
        return None
    if cap is None:
        return whole, keys[0]
    lengths_file = whole / DEMO_LENGTHS_FILE
    if not lengths_file.exists():
        return None  # a warm start from before the lengths were recorded: unknown, built again
    lengths = json.loads(lengths_file.read_text())
    if cap.max_total_tokens is not None and lengths["episode_tokens"] > cap.max_total_tokens:
        return None

    renderer = ChatRenderer(load_tokenizer(model_path))
    for env, n in demo_sources(envs, cfg):
        convos, _ = demonstrations(env, n, cfg.demo_fraction, cfg.seed)
        if any(cap_cuts(cap, renderer, convo) for convo in convos):
            return None
    return whole, keys[0]


def demo_sources(envs: WarmEnvs, cfg: WarmStartConfig) -> list[tuple[ResolvedEnv, int]]:
    """Each env (and kwargs) of `envs` a warm start demonstrates, and how many demonstrations
    of it it builds (`demos_needed`, split evenly)."""
    sources = [env for item in envs for env in (item if isinstance(item, list) else [item])]
    n = max(1, demos_needed(cfg) // len(sources))
    return [(env, n) for env in sources]


def demonstration_trajectories(
    renderer: ChatRenderer, envs: WarmEnvs, cfg: WarmStartConfig, cap: DemoCap | None = None
) -> list[Trajectory]:
    """`cfg.num_demos` demonstrations split evenly over every env and kwargs of `envs`, as
    trajectories cut to `cap` (the run's episode limits, `DemoCap`); those of one env and
    kwargs form one group, so the trainer computes their common prompt (the system prompt and
    tool specs) once per packed row (`share_prefix`).

    Each demonstration is rendered once, append-only (`demo_trajectory`); each env's first is
    also rendered turn by turn after its whole conversation (the slow reference), and where the
    two differ (a chat template that writes a turn differently after more context) that env's
    demonstrations are all rendered the slow way, said on the console."""
    planned = demo_sources(envs, cfg)
    sources, n = [env for env, _ in planned], planned[0][1]
    print(
        f"[warm start] preparing {n * len(sources)} demonstrations ({cfg.steps} steps x "
        f"{cfg.batch_size} draw at most {cfg.steps * cfg.batch_size} of warm_start.num_demos="
        f"{cfg.num_demos})",
        flush=True,
    )
    started, done, every = time.monotonic(), 0, max(1, n * len(sources) // 10)
    demos = []
    for k, env in enumerate(sources):
        convos, tools = demonstrations(env, n, cfg.demo_fraction, cfg.seed, played_turns(cap))
        whole, writer = False, TurnWriter.shared(renderer)
        for i, convo in enumerate(convos):
            demo = demo_trajectory(renderer, convo, tools, f"{env.id}-{k}-{i}", cap, whole, writer)
            if i == 0 and not _renders_alike(renderer, convo, tools, demo, cap):
                print(
                    f"[warm start] {env.id}: the chat template writes a turn differently after "
                    "the whole conversation than after its opening; rendering each of its "
                    "demonstrations whole, turn by turn (slower)",
                    flush=True,
                )
                whole = True
                demo = demo_trajectory(renderer, convo, tools, demo.task_id, cap, whole)
            demo.group_id = f"{env.id}-{k}"
            demos.append(demo)
            done += 1
            if done % every == 0 and done < n * len(sources):
                rate = done / (time.monotonic() - started)
                left = (n * len(sources) - done) / rate
                print(
                    f"[warm start] prepared {done}/{n * len(sources)} demonstrations | "
                    f"{rate:.1f}/s | eta {left:.0f}s",
                    flush=True,
                )
    print(
        f"[warm start] prepared {len(demos)} demonstrations in {time.monotonic() - started:.1f}s",
        flush=True,
    )
    cut = [d for d in demos if d.info.get("demo_cut")]
    if cut:
        limits = ", ".join(dict.fromkeys(c for d in cut for c in d.info["demo_cut"].split(", ")))
        print(
            f"[warm start] {len(cut)} of {len(demos)} demonstrations cut to the run's episode "
            f"limits ({limits}): an episode of the run never gets past them, so they teach "
            "nothing there",
            flush=True,
        )
    return demos


def _renders_alike(
    renderer: ChatRenderer,
    convo: list[Any],
    tools: list[Any],
    demo: Trajectory,
    cap: DemoCap | None,
) -> bool:
    """Whether `demo` (rendered once, append-only) has the tokens of `convo` rendered turn by
    turn after its whole conversation so far (`demo_trajectory(whole=True)`); True when that
    reference cannot render it (a template that drops earlier turns' thinking is not
    prefix-stable: the append-only render is the one a rollout gives)."""
    try:
        reference = demo_trajectory(renderer, convo, tools, demo.task_id, cap, whole=True)
    except ValueError:
        return True
    return reference.token_ids == demo.token_ids and reference.loss_mask == demo.loss_mask


def played_turns(cap: DemoCap | None) -> int | None:
    """The assistant turns a demonstration is asked for at most (`env_demonstrations`): one
    more than `cap.max_turns`, so that a conversation longer than an episode shows as one
    (cut, and keyed so); None: whole conversations."""
    return None if cap is None or cap.max_turns is None else cap.max_turns + 1


def demos_needed(cfg: WarmStartConfig) -> int:
    """Demonstrations a warm start builds: `num_demos`, or fewer when its steps draw fewer
    (`steps x batch_size`): a Gymnasium game's demonstration costs ~0.3-0.6 s to play and render,
    so 2,000 of them for 8 steps took minutes before the first step."""
    return min(cfg.num_demos, cfg.steps * cfg.batch_size)


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


def policy_model(
    base: Path,
    env: ResolvedEnv,
    ws: WarmStartConfig,
    rollout: RolloutConfig,
    *,
    device: str = "auto",
    autocast: str | None = None,
    tiny: bool = False,
) -> Path:
    """The policy folder a run starts from: `base` (the model, resolved by the driver) after
    the warm start `ws` on `env` when `warm_start.enabled` (cached); `rollout`: the limits its
    demonstrations are checked against; `device` / `autocast`: the trainer's; `tiny`: `base`
    is the project's tiny model (its chat template refreshed in cached warm starts). The warm
    start demonstrates `env.kwargs`; with a difficulty ladder, every level of it
    (demonstrations split evenly), so that RL finds a reward signal at each level it climbs to
    (warm-started on the first level only, the calculator earned nothing at difficulty 2 and
    the ladder stalled there)."""
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
    policy = warm_start(
        base, [levels or env], ws, device=device, autocast=autocast, cap=DemoCap.of(rollout)
    )
    if tiny:
        refresh_chat_template(policy)  # warm starts cached before a template fix
    for warning in demo_fit_warnings(policy, rollout):
        print(f"[warm start] warning: {warning}", flush=True)
    return policy

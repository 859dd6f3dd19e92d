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

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.types import Trajectory
from forge_agent.warm_start.cache_key import (
    KEY_FILE,
    describe_key,
    dir_of,
    warm_start_key,
)
from forge_agent.warm_start.config import WarmEnvs, WarmStartConfig
from forge_agent.warm_start.demos import (
    DEMO_LENGTHS_FILE,
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
    out = dir_of(model_path, key, cache_dir or default_cache_dir())
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
    total = demos_needed(cfg)
    n = max(1, total // len(sources))
    print(
        f"[warm start] preparing {n * len(sources)} demonstrations ({cfg.steps} steps x "
        f"{cfg.batch_size} draw at most {cfg.steps * cfg.batch_size} of warm_start.num_demos="
        f"{cfg.num_demos})",
        flush=True,
    )
    started, done, every = time.monotonic(), 0, max(1, n * len(sources) // 10)
    demos = []
    for k, env in enumerate(sources):
        convos, tools = demonstrations(env, n, cfg.demo_fraction, cfg.seed)
        for i, convo in enumerate(convos):
            demo = demo_trajectory(renderer, convo, tools, f"{env.id}-{k}-{i}")
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
    return demos


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
    from forge_agent.models.tiny import refresh_chat_template

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
    policy = warm_start(base, [levels or env], ws, device=device, autocast=autocast)
    if tiny:
        refresh_chat_template(policy)  # warm starts cached before a template fix
    for warning in demo_fit_warnings(policy, rollout):
        print(f"[warm start] warning: {warning}", flush=True)
    return policy

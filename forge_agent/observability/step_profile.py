"""Where a training step's wall-clock goes, phase by phase, as metrics every step.

    profile = PhaseClock()
    generate = profile.timed_generate(generate)      # requests in flight -> "generate"
    envs = profile.timed_envs(pool)                  # env resets / steps -> "env"
    with profile.phase("train"):
        await trainer.train_step(batch)
    metrics = profile.step_metrics()                 # profile/<phase>_s since the last call

Each instant of the loop is charged to exactly one phase, the first active one in `PHASES`
(train, weight_sync, eval, checkpoint, generate, env, reward), else `idle` (nothing running:
controller overhead, a group waiting on scheduling). The phases of a step add up to its
wall-clock. In on-policy mode the rollout phases (generate, env, reward) are what the trainer
waits for; in async mode they overlap training and show in the busy fractions instead.
Busy fractions count overlap: `generator_busy_frac` is the share of the step's wall-clock (eval
excluded) with at least one generate request in flight, `trainer_busy_frac` the share in
`train_step`. Single-threaded (one asyncio loop): no locks.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

PHASES = ("train", "weight_sync", "eval", "checkpoint", "generate", "env", "reward")
TABLE_PHASES = (*PHASES, "idle")


class PhaseClock:
    """Exclusive wall-clock attribution of the training loop to phases (see module docstring);
    `clock`: seconds, monotonic."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.active: Counter[str] = Counter()
        self.exclusive: dict[str, float] = defaultdict(float)  # seconds charged to each phase
        self.busy: dict[str, float] = defaultdict(float)  # seconds each phase was active
        self.last = clock()
        self._mark: dict[str, float] = {}
        self._mark_busy: dict[str, float] = {}
        self._mark_time = self.last
        self.steps: list[dict[str, float]] = []

    def _advance(self) -> None:
        now = self.clock()
        dt, self.last = now - self.last, now
        top = next((p for p in PHASES if self.active[p] > 0), "idle")
        self.exclusive[top] += dt
        if top == "eval":  # busy fractions describe the training loop alone
            return
        for name, n in self.active.items():
            if n > 0:
                self.busy[name] += dt

    def enter(self, name: str) -> None:
        self._advance()
        self.active[name] += 1

    def leave(self, name: str) -> None:
        self._advance()
        self.active[name] -= 1

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark `name` active for the block (blocks may nest and overlap)."""
        self.enter(name)
        try:
            yield
        finally:
            self.leave(name)

    def start(self) -> None:
        """Begin the first step now (what ran before is not part of any step)."""
        self._advance()
        self._mark, self._mark_busy = dict(self.exclusive), dict(self.busy)
        self._mark_time = self.last
        self.steps.clear()

    def step_metrics(self) -> dict[str, float]:
        """`profile/<phase>_s` for every phase since the previous call, `profile/step_s`,
        `profile/generator_busy_frac` and `profile/trainer_busy_frac`; kept in `steps`."""
        self._advance()
        wall = self.last - self._mark_time
        out = {f"profile/{p}_s": self.exclusive[p] - self._mark.get(p, 0.0) for p in TABLE_PHASES}
        loop = max(wall - out["profile/eval_s"], 1e-9)
        busy = {k: v - self._mark_busy.get(k, 0.0) for k, v in self.busy.items()}
        out["profile/step_s"] = wall
        out["profile/generator_busy_frac"] = busy.get("generate", 0.0) / loop
        out["profile/trainer_busy_frac"] = busy.get("train", 0.0) / loop
        self._mark = dict(self.exclusive)
        self._mark_busy = dict(self.busy)
        self._mark_time = self.last
        self.steps.append(out)
        return out

    def summary(self) -> dict[str, Any]:
        """The run's profile: seconds per step (mean over steps) and share of the wall-clock of
        each phase, and the mean busy fractions."""
        n = max(len(self.steps), 1)
        total = sum(s["profile/step_s"] for s in self.steps) or 1e-9
        phases = {
            p: {
                "s_per_step": sum(s[f"profile/{p}_s"] for s in self.steps) / n,
                "share": sum(s[f"profile/{p}_s"] for s in self.steps) / total,
            }
            for p in TABLE_PHASES
        }
        fracs = ("generator_busy_frac", "trainer_busy_frac")
        return {
            "steps": len(self.steps),
            "step_s": total / n,
            "phases": phases,
            **{f: sum(s[f"profile/{f}"] for s in self.steps) / n for f in fracs},
        }

    # ------------------------------------------------------------------ wrappers
    def timed_generate(self, generate: Callable[..., Awaitable[object]]) -> Any:
        """`generate` (a `GenerateFn`) with its requests charged to "generate"."""
        return _TimedGenerate(self, generate)

    def timed_envs(self, envs: object) -> Any:
        """An env source (`EnvSource`: `acquire()`) whose episodes' `reset`/`step` calls are
        charged to "env"; other attributes pass through."""
        return _TimedEnvs(self, envs)


class _TimedGenerate:
    def __init__(self, clock: PhaseClock, generate: Callable[..., Awaitable[object]]) -> None:
        self.clock, self.generate = clock, generate

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.clock.phase("generate"):
            return await self.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.generate, name)


class _TimedEnv:
    def __init__(self, clock: PhaseClock, env: object) -> None:
        self.clock, self.env = clock, env

    async def reset(self, *args: Any, **kwargs: Any) -> Any:
        with self.clock.phase("env"):
            return await self.env.reset(*args, **kwargs)

    async def step(self, *args: Any, **kwargs: Any) -> Any:
        with self.clock.phase("env"):
            return await self.env.step(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


class _TimedEnvs:
    def __init__(self, clock: PhaseClock, envs: object) -> None:
        self.clock, self.envs = clock, envs

    async def acquire(self) -> Any:
        with self.clock.phase("env"):
            env = await self.envs.acquire()
        return _TimedEnv(self.clock, env)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.envs, name)


def format_table(summary: dict[str, Any]) -> str:
    """A plain-text table of `PhaseClock.summary()`."""
    lines = [f"{'phase':<12} {'s/step':>8} {'share':>7}"]
    for name, row in summary["phases"].items():
        lines.append(f"{name:<12} {row['s_per_step']:>8.3f} {row['share']:>6.1%}")
    lines.append(f"{'step':<12} {summary['step_s']:>8.3f} {1:>6.1%}")
    lines.append(f"generator busy {summary['generator_busy_frac']:.1%} of the loop (eval excluded)")
    lines.append(f"trainer busy   {summary['trainer_busy_frac']:.1%} of the loop (eval excluded)")
    return "\n".join(lines)


__all__ = ["PHASES", "PhaseClock", "format_table"]

"""Episodes/s of the async per-episode rollout engine vs. a lock-step batched tool loop.

Both arms run the same `RolloutRunner` episode code on the same vLLM engine (in this process),
the same warm-started tiny model, the same tasks, env seeds and sampling seeds, and at most
`--concurrency` episodes at once:

- async: every episode is its own asyncio task; a finished episode frees its slot at once and
  each episode moves to its next turn as soon as its own tool call returns.
- lock-step: episodes run in batches of `--concurrency`, the way a simple trainer-driven tool
  loop does: generate turn t for all live episodes, wait for all, step all envs, wait for all,
  repeat; the next batch starts when the whole batch is done. (A barrier that every live
  episode of the batch meets before each generate and each env step; an episode that ends
  leaves it.)

The env is the calculator with a per-episode tool latency (`SlowCalculatorEnv`): every env step
sleeps a latency drawn once per episode from a seeded long-tailed distribution (Lomax, median
~30 ms, p90 ~180 ms, capped at 300 ms), keyed by task and env seed so both arms see the same
latencies. It runs in-process through `LocalEnvs` (importable, so an `EnvPool` can run it as
"apps.bench.rollout:SlowCalculatorEnv" too).

Measured per run: episodes/s, generated tokens/s, and the generator's busy fraction (share of
wall time with at least one request in flight) plus its mean requests in flight. Arms alternate
(async first in even repeats, lock-step first in odd ones) so prefix-cache and drift effects
cancel; each repeat draws fresh tasks.

    python -m apps.bench.rollout --episodes 128 --concurrency 16 --repeats 3   # about 1 min
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from apps.bench.util import print_table, write_json
from envs.calculator import CalculatorEnv
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.types import Completion, Message, StepResult, ToolSpec, Trajectory

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# ---------------------------------------------------------------------------- the env
def tool_latency(
    task_id: str, seed: int | None, scale_s: float = 0.05, alpha: float = 1.5, max_s: float = 0.3
) -> float:
    """Seconds each env step of this episode takes: Lomax(`alpha`, `scale_s`) capped at
    `max_s`, drawn from a generator seeded by (task id, env seed)."""
    rng = random.Random(f"latency-{task_id}-{seed}")
    return min(max_s, scale_s * (rng.paretovariate(alpha) - 1.0))


class SlowCalculatorEnv(CalculatorEnv):
    """The calculator env whose every step sleeps a per-episode latency (see `tool_latency`)."""

    def __init__(self, difficulty: int = 1, max_latency_s: float = 0.3) -> None:
        super().__init__(difficulty=difficulty)
        self.max_latency_s = max_latency_s
        self.latency_s = 0.0

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        self.latency_s = tool_latency(str(task["task_id"]), seed, max_s=self.max_latency_s)
        return await super().reset(task, seed)

    async def step(self, assistant_message: Message) -> StepResult:
        await asyncio.sleep(self.latency_s)
        return await super().step(assistant_message)


# ---------------------------------------------------------------------------- lock-step
class TurnBarrier:
    """Where the live episodes of a lock-step batch wait for each other; leaving (an episode
    that ended) releases the others when they are all waiting."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.waiting = 0
        self._released = asyncio.Event()

    async def wait(self) -> None:
        self.waiting += 1
        released = self._released
        if self.waiting >= self.parties:
            self._release()
        await released.wait()

    def leave(self) -> None:
        self.parties -= 1
        if self.parties > 0 and self.waiting >= self.parties:
            self._release()

    def _release(self) -> None:
        released, self._released, self.waiting = self._released, asyncio.Event(), 0
        released.set()


class LockstepEnv:
    """An episode env that waits for the whole batch before each step and leaves at close."""

    def __init__(self, env: Any, barrier: TurnBarrier) -> None:
        self.env = env
        self.barrier = barrier

    async def reset(
        self, task: dict[str, Any], seed: int | None = None
    ) -> tuple[list[Message], list[ToolSpec]]:
        return await self.env.reset(task, seed)

    async def step(self, assistant_message: Message) -> StepResult:
        await self.barrier.wait()  # every live episode has its turn's completion
        return await self.env.step(assistant_message)

    async def close(self) -> None:
        self.barrier.leave()
        await self.env.close()


# ---------------------------------------------------------------------------- measurement
class BusyMeter:
    """Wraps a generate function; accumulates time with >= 1 request in flight and the time
    integral of requests in flight."""

    def __init__(self, generate: Callable[..., Any]) -> None:
        self.generate = generate
        self.in_flight = 0
        self.busy_s = 0.0
        self.request_s = 0.0  # integral of in_flight dt
        self._changed = time.perf_counter()

    def _tick(self, delta: int) -> None:
        now = time.perf_counter()
        if self.in_flight > 0:
            self.busy_s += now - self._changed
            self.request_s += self.in_flight * (now - self._changed)
        self.in_flight += delta
        self._changed = now

    async def __call__(self, prompt_ids: list[int], sampling: Any, session: str) -> Completion:
        self._tick(+1)
        try:
            return await self.generate(prompt_ids, sampling, session)
        finally:
            self._tick(-1)


Episode = tuple[dict[str, Any], int, int]  # task, env seed, sampling seed


async def run_async(engine: Any, renderer: Any, episodes: list[Episode], concurrency: int):
    """All episodes on one engine, at most `concurrency` at once, each at its own pace."""
    from forge_agent.rollout import LocalEnvs, RolloutConfig, RolloutRunner

    meter = BusyMeter(engine.generate)
    rollout = RolloutRunner(
        meter,
        LocalEnvs(SlowCalculatorEnv),
        renderer,
        RolloutConfig(max_concurrent_episodes=concurrency),
    )
    started = time.perf_counter()
    episodes_played = await asyncio.gather(
        *(rollout.run_episode(t, s, f"async-{i}", ss) for i, (t, s, ss) in enumerate(episodes))
    )
    return [traj for (traj,) in episodes_played], time.perf_counter() - started, meter


async def run_lockstep(engine: Any, renderer: Any, episodes: list[Episode], concurrency: int):
    """Batches of `concurrency` episodes, each batch in lock-step turns."""
    from forge_agent.rollout import LocalEnvs, RolloutConfig, RolloutRunner

    meter = BusyMeter(engine.generate)
    trajs: list[Trajectory] = []
    started = time.perf_counter()
    for first in range(0, len(episodes), concurrency):
        batch = episodes[first : first + concurrency]
        barrier = TurnBarrier(len(batch))

        async def generate(ids: list[int], sampling: Any, session: str, b=barrier) -> Completion:
            await b.wait()  # every live episode has its env step's result
            return await meter(ids, sampling, session)

        rollout = RolloutRunner(
            generate,
            LocalEnvs(lambda b=barrier: LockstepEnv(SlowCalculatorEnv(), b)),
            renderer,
            RolloutConfig(max_concurrent_episodes=concurrency),
        )
        played = await asyncio.gather(
            *(
                rollout.run_episode(t, s, f"lockstep-{first + i}", ss)
                for i, (t, s, ss) in enumerate(batch)
            )
        )
        trajs += [traj for (traj,) in played]
    return trajs, time.perf_counter() - started, meter


def make_row(
    arm: str, repeat: int, trajs: list[Trajectory], seconds: float, meter: BusyMeter
) -> dict[str, Any]:
    """One timed run: throughput, generator busy fraction and what the episodes did."""
    sampled = sum(t.num_sampled for t in trajs)
    return {
        "arm": arm,
        "repeat": repeat,
        "episodes": len(trajs),
        "seconds": seconds,
        "episodes_s": len(trajs) / seconds,
        "gen_tokens": sampled,
        "gen_tok_s": sampled / seconds,
        "busy": meter.busy_s / seconds,
        "in_flight": meter.request_s / seconds,
        "turns": statistics.fmean(len(t.turn_spans) for t in trajs),
        "reward": statistics.fmean(t.reward for t in trajs),
        "tool_rate": statistics.fmean(float(t.tool_call_count > 0) for t in trajs),
        "statuses": dict(Counter(t.status.value for t in trajs).most_common()),
    }


def episodes_for(repeat: int, n: int) -> list[Episode]:
    from forge_agent.env.tasks import load_tasks

    tasks = load_tasks(ResolvedEnv.of("calculator"), "train", n, seed=1_000 + repeat)
    return [(t, 1_000 * repeat + i, (repeat * n + i) * 100) for i, t in enumerate(tasks)]


async def bench(model_path: str, n: int, concurrency: int, repeats: int) -> list[dict[str, Any]]:
    from forge_agent.generator import GeneratorConfig, VLLMEngine
    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.rollout import ChatRenderer

    renderer = ChatRenderer(load_tokenizer(model_path))
    engine = VLLMEngine(GeneratorConfig(max_model_len=1024), model_path)
    await engine.start()
    arms = {"async": run_async, "lockstep": run_lockstep}
    rows = []
    try:
        warm = episodes_for(-1, concurrency)
        for run in arms.values():  # warm-up: untimed
            await run(engine, renderer, warm, concurrency)
        for repeat in range(repeats):
            order = ["async", "lockstep"] if repeat % 2 == 0 else ["lockstep", "async"]
            episodes = episodes_for(repeat, n)
            for arm in order:
                trajs, seconds, meter = await arms[arm](engine, renderer, episodes, concurrency)
                row = make_row(arm, repeat, trajs, seconds, meter)
                rows.append(row)
                print(
                    f"  repeat {repeat} {arm:8s} {row['episodes_s']:.2f} ep/s "
                    f"{row['gen_tok_s']:.0f} tok/s busy {row['busy']:.2f}",
                    flush=True,
                )
    finally:
        await engine.shutdown()
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per arm: totals over repeats, and async / lock-step ratios."""
    out = []
    for arm in ("async", "lockstep"):
        mine = [r for r in rows if r["arm"] == arm]
        seconds = sum(r["seconds"] for r in mine)
        out.append(
            {
                "arm": arm,
                "repeat": "all",
                "episodes": sum(r["episodes"] for r in mine),
                "seconds": seconds,
                "episodes_s": sum(r["episodes"] for r in mine) / seconds,
                "gen_tokens": sum(r["gen_tokens"] for r in mine),
                "gen_tok_s": sum(r["gen_tokens"] for r in mine) / seconds,
                "busy": sum(r["busy"] * r["seconds"] for r in mine) / seconds,
                "in_flight": sum(r["in_flight"] * r["seconds"] for r in mine) / seconds,
                "turns": statistics.fmean(r["turns"] for r in mine),
                "reward": statistics.fmean(r["reward"] for r in mine),
                "tool_rate": statistics.fmean(r["tool_rate"] for r in mine),
            }
        )
    a, b = out
    a["speedup"] = a["episodes_s"] / b["episodes_s"]
    a["tok_speedup"] = a["gen_tok_s"] / b["gen_tok_s"]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=128, help="episodes per arm per repeat")
    parser.add_argument("--concurrency", type=int, default=16, help="episodes in flight")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per arm")
    parser.add_argument("--warm-start-steps", type=int, default=300)
    parser.add_argument("--out", default="bench_results/rollout.json", help="JSON output path")
    args = parser.parse_args(argv)

    from forge_agent.models.tiny import ensure_tiny_model
    from forge_agent.warm_start import WarmStartConfig, warm_start

    model_path = str(
        warm_start(
            ensure_tiny_model(),
            [ResolvedEnv.of("calculator", kwargs={"difficulty": 1})],
            WarmStartConfig(steps=args.warm_start_steps),
        )
    )
    rows = asyncio.run(bench(model_path, args.episodes, args.concurrency, args.repeats))
    totals = summarize(rows)
    columns = [
        ("arm", "arm", ""),
        ("repeat", "repeat", ""),
        ("episodes", "episodes", "d"),
        ("seconds", "seconds", ".1f"),
        ("episodes_s", "episodes/s", ".2f"),
        ("gen_tok_s", "gen tokens/s", ".0f"),
        ("busy", "gen busy", ".2f"),
        ("in_flight", "in flight", ".1f"),
        ("turns", "turns/ep", ".2f"),
        ("reward", "reward", ".2f"),
        ("tool_rate", "tool rate", ".2f"),
        ("speedup", "async/lockstep", ".2f"),
    ]
    print_table([{**r, "repeat": str(r["repeat"])} for r in rows] + totals, columns)
    report = {
        "benchmark": "rollout",
        "model": model_path,
        "episodes": args.episodes,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
        "tool_latency": "Lomax(alpha=1.5, scale=50 ms) per episode, capped at 300 ms",
        "rows": rows,
        "totals": totals,
        "speedup_episodes_s": totals[0]["speedup"],
        "speedup_gen_tok_s": totals[0]["tok_speedup"],
    }
    write_json(args.out, report)
    return report


if __name__ == "__main__":
    main()

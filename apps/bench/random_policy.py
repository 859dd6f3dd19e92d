"""Random-policy baseline of any env: the project's evaluator with a random policy as the model.

The held-out reward a trained policy reaches means little without the reward of a policy that
knows the call format and nothing of the task. This bench measures that reward exactly as a
run's periodic evaluation measures the model's (`forge_agent.run.runners`): the same
`eval.num_tasks` held-out tasks (`forge_agent.env.tasks.eval_tasks`), `eval.k` episodes a task
with the same env seeds, env workers (`EnvPool`), rollout limits and rendering, scored by
`forge_agent.evaluation.evaluate` with the env's own reward (an agent program's: its reward
function through the run's rubric, `agent_reward` only). Only the generate function changes:
`RandomPolicy` stands where the generator would answer each prompt.

The random policy, each episode: `--min-calls` (1) to `--max-calls` turns, uniform (by default
at most `rollout.max_turns - 1`, so the final answer still fits in the episode's turns), each
one well-formed call of a tool chosen uniformly from the tools the prompt offers, its
arguments sampled from the tool's JSON schema (`forge_agent.env.demonstrations.sampled_call`: enum
values, small numbers, one to three words of the conversation); then a final answer, a word
of the last tool output (`forge_agent.env.demonstrations.final_answer`), as the warm start's schema
demonstrations do. An env may end the episode sooner (a game over). A turn whose call does
not fit the per-turn token cap is sampled again (up to 20 times), else cut at the cap as the
generator would cut it.

It reads the prompt the evaluator renders (the Qwen3 chat format of the tiny model and Qwen3
models): the tools from its `<tools>` block, the conversation from its turns, so an OpenEnv URL
and an agent program (whose requests reach it through the run's OpenAI-compatible endpoint)
are measured like an env in a worker. It loads the config's tokenizer only (`model.name`;
no weights, no warm start).

    python -m apps.bench.random_policy                                  # calculator, default.yaml
    python -m apps.bench.random_policy --config apps/agent/frozen_lake.yaml --episodes-per-task 64
    python -m apps.bench.random_policy env.id=blackjack env.kwargs={} --episodes-per-task 32

Prints a table (env, tasks, episodes, mean held-out reward, tool-call rate) and adds its row to
`--out` (default bench_results/random_policy.json; a row of the same env, kwargs and calls
drawn is replaced), so runs of several envs make one table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from forge_agent.env.demonstrations import final_answer, sampled_call
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.evaluation import EvalReport, evaluate
from forge_agent.generator.config import SamplingConfig
from forge_agent.run.config import AgentConfig
from forge_agent.types import Completion, Message, ToolSpec

RESAMPLES = 20
"""Tries at a turn that fits the per-turn token cap before it is cut at the cap."""

_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)
_TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
_CALL = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


class NoToolsError(ValueError):
    """A prompt offered no tools: a random tool-calling policy has nothing to call."""


def read_prompt(text: str) -> tuple[list[Message], list[ToolSpec]]:
    """The finished turns and the tool specs of a Qwen3-format prompt (decoded with its
    special tokens): tool responses become `tool` messages; the system turn loses its tools
    block; assistant turns keep their text (calls and thinking removed)."""
    from forge_agent.models.tiny import TOOLS_HEADER

    tools_block = _TOOLS.search(text)
    tools = (
        [json.loads(line) for line in tools_block.group(1).splitlines() if line.strip()]
        if tools_block
        else []
    )
    messages: list[Message] = []
    for role, body in _TURN.findall(text):
        if role == "system":
            messages.append({"role": role, "content": body.split(TOOLS_HEADER)[0].strip()})
        elif role == "user" and _RESPONSE.search(body):
            messages.extend({"role": "tool", "content": c} for c in _RESPONSE.findall(body))
        elif role == "assistant":
            messages.append({"role": role, "content": _CALL.sub("", _THINK.sub("", body))})
        else:
            messages.append({"role": role, "content": body})
    return messages, tools


@dataclass
class _Episode:
    rng: random.Random
    calls: int  # tool-calling turns before the final answer


class RandomPolicy:
    """A `GenerateFn` (prompt ids, sampling, session -> completion) that plays at random: in
    each episode (a session), 1 to `max_calls` turns of one tool call each (at least
    `min_calls`), then a final answer; see the module docstring. Seeded per episode from
    `seed` and the turn-0 sampling seed the evaluator gives (an agent program's endpoint gives
    none: then from the session id, which is not reproducible)."""

    def __init__(self, tokenizer: Any, max_calls: int, min_calls: int = 1, seed: int = 0) -> None:
        if not 1 <= min_calls <= max_calls:
            raise ValueError(
                f"the random policy needs 1 <= min_calls <= max_calls, got {min_calls}, {max_calls}"
            )
        self.tokenizer = tokenizer
        self.min_calls, self.max_calls, self.seed = min_calls, max_calls, seed
        self.stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._episodes: dict[str, _Episode] = {}
        self.stats = dict.fromkeys(("turns", "calls", "answers", "resampled", "cut", "no_tools"), 0)

    async def __call__(
        self, prompt_ids: list[int], sampling: SamplingConfig, session: str
    ) -> Completion:
        text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        convo, tools = read_prompt(text)
        if not tools:
            self.stats["no_tools"] += 1
            raise NoToolsError("the prompt offers no tools")
        episode = self._episodes.get(session)
        if episode is None:
            key = sampling.seed if sampling.seed is not None else session
            rng = random.Random(f"random-policy-{self.seed}-{key}")
            episode = _Episode(rng, rng.randint(self.min_calls, self.max_calls))
            self._episodes[session] = episode
        calling = sum(m["role"] == "assistant" for m in convo) < episode.calls
        self.stats["turns"] += 1
        self.stats["calls" if calling else "answers"] += 1
        for attempt in range(RESAMPLES):
            if calling:
                call = sampled_call(episode.rng.choice(tools), convo, episode.rng, "call")
                fn = call["function"]
                body = f'<tool_call>\n{{"name": "{fn["name"]}", "arguments": {fn["arguments"]}}}'
                body += "\n</tool_call>"
            else:
                body = final_answer(convo, episode.rng)
            ids = [*self.tokenizer.encode(body, add_special_tokens=False), self.stop_id]
            if len(ids) <= sampling.max_tokens:
                self.stats["resampled"] += attempt > 0
                return Completion(ids, [0.0] * len(ids), "stop", policy_version=0)
        self.stats["cut"] += 1
        ids = ids[: sampling.max_tokens]
        return Completion(ids, [0.0] * len(ids), "length", policy_version=0)


def tokenizer_of(cfg: AgentConfig) -> Any:
    """The tokenizer of the config's policy: the tiny model's (built and cached, as a run
    builds it; the warm start keeps it) or `model.name`'s. No weights are loaded."""
    from forge_agent.models.tiny import ensure_tiny_model, load_tokenizer

    if cfg.model.name == "tiny":
        return load_tokenizer(ensure_tiny_model(cfg.model.tiny_config()))
    from forge_agent.models.hub import resolve_model

    return load_tokenizer(resolve_model(cfg.model.name))


async def random_policy_report(
    cfg: AgentConfig,
    env: ResolvedEnv,
    policy: RandomPolicy,
    renderer: Any,
    envs: Any,
    num_tasks: int,
) -> EvalReport:
    """`cfg.eval.k` episodes of each of the first `num_tasks` held-out tasks of `env` (the
    config's env, resolved), played by `policy` on the env source `envs` through a run's
    runners (`build_runners`) and scored as a run's periodic evaluation scores them (an agent
    program: its reward function through the run's rubric, `agent_rubric_score`)."""
    from forge_agent.env.tasks import eval_tasks
    from forge_agent.run.runners import build_runners

    tasks = eval_tasks(env, num_tasks)
    runners = await build_runners(
        cfg.runner_config(), env, policy, envs, renderer, cfg.generator.max_model_len,
        route_adapters=False,
    )  # fmt: skip
    try:
        return await evaluate(
            runners.eval, tasks, cfg.eval.k, seed=cfg.seed, score=runners.eval_score
        )
    finally:
        await runners.stop()


async def run(
    cfg: AgentConfig, env: ResolvedEnv, min_calls: int, max_calls: int, seed: int
) -> dict[str, Any]:
    """The baseline of `cfg`'s env as one result row (its report included). Raises
    `NoToolsError` naming the env when its first held-out episode offers no tools."""
    from forge_agent.env import EnvPool
    from forge_agent.rollout import ChatRenderer

    renderer = ChatRenderer(tokenizer_of(cfg), cfg.renderer)
    if renderer.kind != "qwen3":
        raise ValueError(
            f"model.name={cfg.model.name!r} renders with renderer kind {renderer.kind!r}; the "
            "random policy reads Qwen3-format prompts (model.name=tiny or a Qwen3 model)"
        )
    policy = RandomPolicy(renderer.tokenizer, max_calls, min_calls, seed)
    workers = cfg.services.env
    pool = EnvPool(env, workers.count() * workers.envs_per_worker, workers.envs_per_worker)
    started = time.monotonic()
    try:
        await pool.start()
        probe_cfg = replace(cfg, eval=replace(cfg.eval, k=1))
        await random_policy_report(probe_cfg, env, policy, renderer, pool, 1)
        if policy.stats["no_tools"]:
            raise NoToolsError(
                f"env {cfg.env.id!r} offers no tools on its first held-out task: a random "
                "tool-calling policy has nothing to call"
            )
        policy.stats = dict.fromkeys(policy.stats, 0)
        report = await random_policy_report(cfg, env, policy, renderer, pool, cfg.eval.num_tasks)
    finally:
        await pool.close()
    return {
        "env": cfg.env.id,
        "kwargs": dict(cfg.env.kwargs),
        "tasks": report.num_tasks,
        "episodes": report.num_episodes,
        "scored": report.num_scored,
        "mean_reward": report.mean_reward,
        "pass_at_1": report.pass_at_1,
        "tool_call_rate": report.tool_call_rate,
        "calls_per_episode": report.tool_calls_per_episode,
        "statuses": report.status_counts,
        "calls": [min_calls, max_calls],
        "policy": policy.stats,
        "seconds": time.monotonic() - started,
        "report": report.to_json(),
    }


COLUMNS = [
    ("env", "env", "s"), ("kwargs", "kwargs", "s"), ("tasks", "tasks", "d"),
    ("episodes", "episodes", "d"), ("mean_reward", "mean held-out reward", ".3f"),
    ("tool_call_rate", "tool-call rate", ".3f"), ("calls_per_episode", "calls/episode", ".2f"),
    ("calls", "calls drawn", "s"),
]  # fmt: skip


def table_row(row: dict[str, Any]) -> dict[str, Any]:
    """A result row as the table prints it."""
    lo, hi = row["calls"]
    return {
        **row,
        "kwargs": json.dumps(row["kwargs"], sort_keys=True),
        "calls": f"{lo}" if lo == hi else f"{lo}-{hi}",
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, measure the baseline, print the table of `--out`'s rows."""
    from apps.bench.util import print_table, write_json
    from forge_agent.errors import SetupError, report_setup_error
    from forge_agent.run.config import load_config
    from forge_agent.run.setup_checks import check_env_seats, check_setup

    parser = argparse.ArgumentParser(
        prog="python -m apps.bench.random_policy", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", help="YAML config (default: the built-in CPU default)")
    parser.add_argument("--episodes-per-task", type=int, help="episodes a task (default: eval.k)")
    parser.add_argument("--min-calls", type=int, default=1, help="tool calls an episode, least")
    parser.add_argument(
        "--max-calls", type=int, help="tool calls an episode, most (default: rollout.max_turns - 1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the random policy's seed")
    parser.add_argument("--out", type=Path, default=Path("bench_results/random_policy.json"))
    parser.add_argument("--verbose", action="store_true", help="tracebacks of setup errors")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        env = check_setup(cfg).env  # an unknown env id, module or bad env.kwargs: one line
    except SetupError as exc:
        return report_setup_error(exc, verbose=args.verbose)
    if check_env_seats(env, cfg.weight_store.max_versions):
        parser.error(f"env {cfg.env.id!r} has several seats (env.seats): not supported here")
    if args.episodes_per_task is not None:
        cfg = replace(cfg, eval=replace(cfg.eval, k=args.episodes_per_task))
    max_calls = args.max_calls or max(cfg.rollout.max_turns - 1, 1)
    try:
        row = asyncio.run(run(cfg, env, args.min_calls, max_calls, args.seed))
    except (NoToolsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = []
    if args.out.exists():
        rows = json.loads(args.out.read_text()).get("rows", [])
    key = ("env", "kwargs", "calls")
    rows = [r for r in rows if [r[k] for k in key] != [row[k] for k in key]] + [row]
    print(f"{row['env']}: {row['statuses']}; policy turns {row['policy']}; {row['seconds']:.0f} s")
    table = print_table([table_row(r) for r in rows], COLUMNS)
    write_json(args.out, {"rows": rows, "table": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

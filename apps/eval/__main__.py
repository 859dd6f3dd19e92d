"""Evaluate a policy on held-out tasks: mean reward, pass@1, pass@k, statuses and tool use.

    python -m apps.eval [--config apps/agent/default.yaml] [--model PATH] [--out DIR] key=value ...

The policy is `--model` (a Hugging Face folder) or, without it, the config's model: the tiny
model is built locally and, when `warm_start.enabled`, given the same supervised warm start as
training (cached after the first build). The vLLM engine runs in this process with the config's
`generator` settings; episodes run in an `EnvPool` of `env.id` with the config's `rollout`
limits and `eval.temperature`. The tasks are `eval.num_tasks` held-out tasks from
`forge_agent.env.tasks.eval_tasks` (from `env.eval_seed`), each run `eval.k` times with
env and sampling seeds from `seed`, as the training controller's periodic eval does.

Writes into `--out` (default `runs/eval`): `eval.json` (report, metrics, config, model),
`traces.jsonl` (one record per episode) and `traces.html` (the trace viewer page).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import eval_tasks
from forge_agent.evaluation import EvalReport, evaluate
from forge_agent.run.config import AgentConfig, load_config, to_dict

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def resolve_model(cfg: AgentConfig, env: ResolvedEnv, model: str | None) -> Path | str:
    """The policy to evaluate: `model` (a folder or a cached hub name), or the config's policy
    (tiny: built + warm-started on `env`, `cfg.env` resolved)."""
    if model:
        from forge_agent.models.hub import resolve_model as resolve_folder

        return resolve_folder(model, key="--model")
    from forge_agent.run.controller import start_policy

    return start_policy(cfg, env)


class EpisodeProgress:
    """A progress bar of finished episodes: done/total, rate and ETA (tqdm when installed,
    otherwise a plain line every few seconds)."""

    def __init__(self, total: int, every_s: float = 5.0) -> None:
        self.total = total
        self.every_s = every_s
        self.started = time.monotonic()
        self._last_print = 0.0
        self._bar = None
        if importlib.util.find_spec("tqdm") is not None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit="ep", desc="eval", file=sys.stderr)

    def __call__(self, done: int, total: int) -> None:
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
            return
        now = time.monotonic()
        if now - self._last_print >= self.every_s or done == total:
            rate = done / max(now - self.started, 1e-9)
            eta = (total - done) / rate if rate > 0 else float("inf")
            print(f"eval {done}/{total} episodes | {rate:.2f} ep/s | ETA {eta:.0f}s", flush=True)
            self._last_print = now

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


async def run_eval(
    cfg: AgentConfig, env: ResolvedEnv, model_path: Path | str, out: Path
) -> EvalReport:
    """Start the engine and env workers, evaluate, write traces; returns the report. The
    rollout runners are a run's (`build_runners`), over an in-process vLLM engine."""
    from forge_agent.env import EnvPool
    from forge_agent.generator import VLLMEngine
    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.observability.traces import TraceWriter
    from forge_agent.rollout import ChatRenderer
    from forge_agent.run.runners import build_runners

    tasks = eval_tasks(env, cfg.eval.num_tasks)
    renderer = ChatRenderer(load_tokenizer(model_path), cfg.renderer)
    engine = VLLMEngine(cfg.generator, str(model_path), dtype=cfg.model.dtype, seed=cfg.seed)
    workers = cfg.services.env
    pool = EnvPool(env, workers.count() * workers.envs_per_worker, workers.envs_per_worker)
    traces_path = out / "traces.jsonl"
    traces_path.unlink(missing_ok=True)
    writer = TraceWriter(traces_path)
    progress: EpisodeProgress | None = None
    runners = None
    try:
        print(
            f"starting vLLM on {model_path} and {pool.size} {cfg.env.id} envs on "
            f"{pool.num_workers} env workers",
            flush=True,
        )
        await asyncio.gather(engine.start(), pool.start())
        runners = await build_runners(
            cfg.runner_config(),
            env,
            lambda ids, sampling, session: engine.generate(ids, sampling, session),
            pool,
            renderer,
            engine.max_model_len,
            policy_path=model_path,  # scripted and snapshot seats (env.seats, multi-seat)
            on_eval_trajectory=lambda traj: writer.write(traj, {"split": "eval"}),
            route_adapters=False,  # this engine serves one model, no adapter by name
        )
        progress = EpisodeProgress(len(tasks) * cfg.eval.k)  # after start-up: honest rate/ETA
        report = await evaluate(
            runners.eval, tasks, cfg.eval.k, seed=cfg.seed, progress=progress,
            score=runners.eval_score,
        )  # fmt: skip
    finally:
        if progress is not None:
            progress.close()
        writer.close()
        if runners is not None:
            await runners.stop()
        await pool.close()
        await engine.shutdown()
    return report


def write_outputs(cfg: AgentConfig, model_path: Path | str, report: EvalReport, out: Path) -> None:
    """`eval.json` and the HTML trace page next to `traces.jsonl`."""
    from forge_agent.observability.trace_html import load_token_decoder, write_html
    from forge_agent.observability.traces import read_traces

    summary: dict[str, Any] = {
        "model": str(model_path),
        "env": cfg.env.id,
        "metrics": report.as_metrics(),
        "report": report.to_json(),
        "config": to_dict(cfg),
    }
    (out / "eval.json").write_text(json.dumps(summary, indent=2, default=str))
    decode = load_token_decoder(model_path) if Path(model_path).is_dir() else None
    write_html(
        read_traces(out / "traces.jsonl"),
        out / "traces.html",
        decode=decode,
        title=f"eval: {cfg.env.id} ({Path(str(model_path)).name})",
    )


def main(argv: list[str] | None = None) -> EvalReport:
    """Parse the command line, evaluate, print the table and write the outputs.

    Raises a `SetupError` (one line: the input and the fix) for a bad config, env, data file
    or model, before the engine starts; `cli` prints it and exits with status 2.
    """
    from forge_agent.observability.console import run_console
    from forge_agent.run.setup_checks import check_setup

    parser = argparse.ArgumentParser(prog="python -m apps.eval", description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="YAML config (default: the built-in CPU default)")
    parser.add_argument("--model", help="model folder to evaluate (default: the config's model)")
    parser.add_argument("--out", type=Path, default=Path("runs/eval"), help="output folder")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="third-party logs (vLLM, torch) on the console instead of OUT/eval.log",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)

    cfg = load_config(args.config, args.overrides)
    env = check_setup(cfg).env  # env, tasks and model.name: a bad one fails here, in one line
    if args.model:
        resolve_model(cfg, env, args.model)  # a missing folder fails before the log file is made
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "eval.log"
    if not args.verbose:
        # vLLM runs in this process here, and its own log handler would write to the terminal
        # stream `run_console` keeps for the project's lines; unconfigured, its records go to
        # the root logger, which `run_console` points at OUT/eval.log
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    with run_console(log, verbose=args.verbose):
        if not args.verbose:
            print(f"third-party logs: {log} (--verbose shows them here)", flush=True)
        model_path = resolve_model(cfg, env, args.model)
        report = asyncio.run(run_eval(cfg, env, model_path, args.out))
        print(f"\n{cfg.env.id} held-out eval of {model_path}\n{report.table()}")
        write_outputs(cfg, model_path, report, args.out)
        print(f"wrote {args.out / 'eval.json'}, traces.jsonl and traces.html")
    return report


def cli(argv: list[str] | None = None) -> int:
    """`main` as a program: a `SetupError` is one line on stderr and exit status 2."""
    from forge_agent.errors import SetupError, report_setup_error

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        main(argv)
    except SetupError as exc:
        return report_setup_error(exc, verbose="--verbose" in argv)
    return 0


if __name__ == "__main__":
    sys.exit(cli())

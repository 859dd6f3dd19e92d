"""Train a tool-using agent with GRPO: `python -m apps.agent.main [--config FILE] [key=value ...]`.

With no arguments this runs the embedded CPU default (apps/agent/default.yaml): the tiny Qwen3
model, a short supervised warm start, then GRPO on the calculator env, evaluating on held-out
tasks as it goes. Outputs land in `output_dir`: metrics.jsonl, curves.png, traces.jsonl,
traces.html, checkpoints/ and summary.json.

The console shows the project's own lines (setup stages, warm start, evals, the progress bar,
the summary); third-party logs (vLLM, torch, Triton, Monarch) go to `output_dir/run.log`.
`--verbose` shows them on the console instead.

Exit status: 0 done; 2 a bad input (one line naming it), or a `--check` episode that ended in a
failure (the env, its judge or step raised); 3 a run that failed mid-way (one line
naming the failing part and its exception, the log, the traces and the last checkpoint; the
traceback in run.log, or on the console with `--verbose`); 130 Ctrl-C.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a bad input, 3 for a run that
    failed mid-way, 130 for Ctrl-C)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help" in argv or "-h" in argv:
        print(usage())
        return 0
    verbose = "--verbose" in argv
    check_only = "--check" in argv
    argv = [a for a in argv if a not in ("--verbose", "--check")]
    try:
        return _run(argv, verbose, check_only)
    except Exception as exc:
        from forge_agent.errors import SetupError, report_setup_error

        if not isinstance(exc, SetupError):
            raise  # a bug: its traceback is the report
        return report_setup_error(exc, verbose)


USAGE = """usage: python -m apps.agent.main [--config FILE] [--check] [--verbose] [key=value ...]

Train a tool-using agent with GRPO. With no arguments: the embedded CPU default
(apps/agent/default.yaml): the tiny Qwen3 model, a warm start, GRPO on the calculator env.

options:
  --config FILE  a YAML config; `defaults: default.yaml` inherits the default's keys
  --check        check the config, the env, its tasks and the model, play one episode on the
                 first train and held-out task in an env worker (a scripted answer: reset,
                 step and judge run), one that calls each tool through the renderer, render
                 two warm-start demonstrations, print how each went, then exit (no model
                 starts)
  --verbose      third-party logs (vLLM, torch, Monarch) on the console instead of
                 OUTPUT_DIR/run.log, and the traceback of a setup error or a failed run
  -h, --help     this message
  key=value      override any key below; quote values with spaces: 'env.kwargs={difficulty: 2}'

examples:
  python -m apps.agent.main training.steps=10 'env.kwargs={difficulty: 2}'
  python -m apps.agent.main env.id=blackjack 'env.kwargs={}' --check
  python -m apps.agent.main --config apps/agent/qwen3_8b_code_exec.yaml resume=true

config sections and their keys, with the defaults (apps/agent/default.yaml says what each does):"""


def usage() -> str:
    """The `--help` text: options, examples, then every config key and its default, generated
    from `AgentConfig` (so it cannot drift from the schema)."""
    from forge_agent.run.config import AgentConfig
    from forge_agent.typed_config import describe_keys

    return "\n".join([USAGE, *describe_keys(AgentConfig())])


def policy_renderer(cfg: Any, report: Any) -> Any:
    """The policy's renderer (the tiny model's tokenizer is built if needed; a hub model's
    must load from its folder). A tokenizer that does not load, or that no renderer can write
    conversations for, is a `SetupError` naming the model, what is missing and the key."""
    from forge_agent.errors import SetupError
    from forge_agent.models.tiny import ensure_tiny_model, load_tokenizer
    from forge_agent.rollout import ChatRenderer

    folder = report.model or ensure_tiny_model(cfg.model.tiny_config())
    try:
        tokenizer = load_tokenizer(folder)
    except (OSError, ValueError) as exc:
        raise SetupError(
            f"model.name={cfg.model.name!r}: its tokenizer ({folder}) did not load: {exc}"
        ) from None
    try:
        return ChatRenderer(tokenizer, cfg.renderer)
    except SetupError as exc:
        raise SetupError(f"model.name={cfg.model.name!r}: {exc}") from None


def prompt_lengths(cfg: Any, report: Any, renderer: Any) -> str:
    """`--check`'s line on prompt lengths: the warning of `check_prompt_lengths` over the
    checked train and eval tasks, rendered with the policy's renderer."""
    from forge_agent.run.setup_checks import check_prompt_lengths

    tasks = [*report.train_tasks, *report.eval_tasks]
    limit = cfg.rollout.max_total_tokens  # <= generator.max_model_len (checked)
    warning = check_prompt_lengths(report.env, tasks, renderer, limit)
    return f"warning: {warning}" if warning else f"prompt lengths: all < {limit} tokens"


def _check(cfg: Any, report: Any, renderer: Any, lengths: str) -> int:
    """`--check`: the setup report, the prompt lengths and one played episode per split; exit
    2 when an episode fails (a run would score or lose every such episode as a failure)."""
    from forge_agent.errors import EXIT_SETUP_ERROR
    from forge_agent.run.check_episodes import check_episodes

    stops = ", ".join(
        repr(renderer.tokenizer.convert_ids_to_tokens(i)) for i in renderer.stop_token_ids
    )
    for line in [
        "config: ok",
        *report.lines(),
        f"renderer: {renderer.kind} (stops on {stops})",
        lengths,
    ]:
        print(line, flush=True)
    train, held_out = report.train_tasks[:1], report.eval_tasks[:1]
    check = check_episodes(cfg, report.env, renderer, train, held_out, report.train_tasks[:2])
    for line in check.lines():
        print(line, flush=True)
    if not check.failed and not check.problems:
        return 0
    if check.failed:
        ended = ", ".join(sorted({e.status for e in check.failed}))
        print(
            f"check failed: {len(check.failed)} of {len(check.episodes)} episodes ended "
            f"{ended} (the env raised; its error is above)",
            file=sys.stderr,
            flush=True,
        )
    for problem in check.problems:
        print(f"check failed: {problem}", file=sys.stderr, flush=True)
    return EXIT_SETUP_ERROR


def _run(argv: list[str], verbose: bool, check_only: bool) -> int:
    from forge_agent.run.config import parse_cli
    from forge_agent.run.setup_checks import check_setup

    cfg = parse_cli(argv)
    # the env, its tasks and the model, before anything starts: a bad one is one line
    report = check_setup(cfg)
    renderer = policy_renderer(cfg, report)
    lengths = prompt_lengths(cfg, report, renderer)
    if check_only:
        return _check(cfg, report, renderer, lengths)
    if lengths.startswith("warning"):  # episodes that would end prompt_too_long, unsampled
        print(lengths, file=sys.stderr, flush=True)
    from forge_agent.errors import RunFailed, report_run_failed
    from forge_agent.observability.console import run_console
    from forge_agent.run.controller import train

    level = os.environ.get("FORGE_AGENT_LOG", "WARNING")
    log = Path(cfg.output_dir) / "run.log"
    with run_console(log, verbose=verbose, level=level):
        if not verbose:
            print(f"[setup] third-party logs: {log} (--verbose shows them here)", flush=True)
        try:
            summary = asyncio.run(train(cfg))
        except (KeyboardInterrupt, asyncio.CancelledError):
            print("stopped: actors, env workers and sandboxes were shut down", file=sys.stderr)
            return 130
        except RunFailed as exc:  # one line; the traceback in run.log (--verbose: here)
            if not verbose:
                exc.kept = {"log": str(log), **exc.kept}
                with log.open("a") as file:
                    traceback.print_exception(exc.__cause__ or exc, file=file)
                    print(exc.line(), file=file)
            return report_run_failed(exc, verbose)
    evals = summary["evals"]
    if evals:
        first, last = evals[0], evals[-1]
        print(
            f"held-out reward: {first.get('eval/reward/mean', 0):.3f} at step {first['step']}"
            f" -> {last.get('eval/reward/mean', 0):.3f} at step {last['step']}"
        )
    profile = summary.get("profile")
    if profile and profile["steps"]:
        phases = profile["phases"].items()
        print(
            f"{profile['step_s']:.2f} s per step: "
            + ", ".join(f"{k} {v['s_per_step']:.2f}" for k, v in phases if v["s_per_step"] >= 0.005)
        )
    evicted = summary["counts"].get("replay_evicted", 0)
    if cfg.training.max_policy_lag > 0:
        print(
            f"replay: {evicted} groups evicted by the staleness bound "
            f"(training.max_policy_lag={cfg.training.max_policy_lag})"
        )
    elif evicted:
        print(f"replay: {evicted} groups generated on-policy were not trained on", file=sys.stderr)
    print(
        f"done: {summary['steps']} steps in {summary['wall_s']:.0f}s; outputs in {cfg.output_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A run that fails mid-way, made into one `RunFailed`: the part that failed and its exception,
a last checkpoint when the trainer is still alive, and where the traces and checkpoint are.

    try:
        await controller.run()
    except Exception as exc:
        raise await run_failed(exc, controller.failure_context()) from exc

The part is, in this order: the service that recovery could not bring back (`ServiceFailed`,
or a `ServiceRestarted` nobody handled); the env (or the generator) when the run stopped
because most episodes of the groups it dropped failed (`NoTrainingSignal`: `policy_error`
from a step that raised, `env_error`, ...), with the status, the last such episode's error and
its fix (`run.stop_causes`); else the module the exception came from. The failure is written
to summary.json too (`failure`), beside the steps, evals and counts reached.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge_agent.algorithms.replay import NoTrainingSignal
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.errors import RunFailed
from forge_agent.run import outputs
from forge_agent.run.state import RunState
from forge_agent.run.stop_causes import StopFacts, stop_cause, teaching_help, warm_start_kind
from forge_agent.run.supervision import ServiceFailed, ServiceRestarted
from forge_agent.trainer.checkpoint_dirs import complete_checkpoints
from forge_agent.types import INFRA_STATUSES, Status

if TYPE_CHECKING:
    from forge_agent.run.recovery import Recovery

__all__ = [
    "FailureContext",
    "failed_part",
    "failure_summary",
    "last_checkpoint",
    "run_failed",
    "write_stop_summary",
]


def failed_part(
    exc: BaseException,
    facts: StopFacts,
    counts: Mapping[str, int],
    errors: Mapping[str, str],
    warm_start: str | None = None,
) -> tuple[str, str]:
    """(the failing part, its error) for `exc`, raised out of a run (`facts`: its env,
    rollout, warm start, model) whose training episodes ended with `counts` (`status/<status>`
    -> n) and `errors` (status -> last error text). A `NoTrainingSignal` is named by how the
    dropped groups' episodes ended (`exc.statuses`; else, when most were lost to failures,
    the infra statuses of `counts`) when most did not end `ok`: the status, its last error
    text and its fix (`stop_causes.episode_cause`). `warm_start`: what the warm start taught
    (`stop_causes.warm_start_kind`; None: unknown)."""
    if isinstance(exc, ServiceFailed | ServiceRestarted):
        return f"{exc.service} service", f"{type(exc).__name__}: {exc}"
    env = f"env {facts.env.id!r}"
    if isinstance(exc, NoTrainingSignal):
        stopped = str(exc).split(". ")[0]  # the watch's first sentence: how many groups
        statuses = exc.statuses
        if not statuses and exc.lost_to_failures:  # a watch not told the statuses
            statuses = {s.value: counts.get(f"status/{s.value}", 0) for s in INFRA_STATUSES}
        scope = "training episodes of the dropped groups" if exc.statuses else "training episodes"
        named = stop_cause(statuses, facts, errors, scope, failures_first=exc.lost_to_failures)
        if named is not None:
            status, cause = named
            ended = Status(status)
            part = "generator" if ended is Status.GENERATOR_ERROR else env
            if not (ended.is_infra_failure or ended.is_policy_failure):  # cut, forfeit
                part = f"training on {env}"
            return part, f"{cause} ({stopped})"
        # the episodes ran and ended normally; their rewards gave no signal
        error = f"{type(exc).__name__}: {_first_line(exc)}"
        advice = teaching_help(facts, warm_start or "unknown")
        return (
            f"training on {env}",
            f"{error} What would help first: {advice}." if advice else error,
        )
    return f"module {_origin(exc)}", f"{type(exc).__name__}: {_first_line(exc)}"


def _origin(exc: BaseException) -> str:
    """`module (file:line)` of the innermost frame of `exc` in project or user code (not the
    standard library or an installed dependency), else of its innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__module__
    ours = [
        f for f in frames if "site-packages" not in f.filename and "/lib/python" not in f.filename
    ]
    frame = (ours or frames)[-1]
    return f"{_module_name(frame.filename)} ({Path(frame.filename).name}:{frame.lineno})"


def _module_name(filename: str) -> str:
    path = Path(filename).with_suffix("")
    parts = path.parts
    for root in ("forge_agent", "apps", "envs", "tests"):
        if root in parts:
            return ".".join(parts[parts.index(root) :])
    return path.name


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


@dataclass
class FailureContext:
    """What a failed run's report reads: what its stops name (`StopFacts`), its `RunState`,
    and what setup had built when it failed (`env`, `out`, `recovery`, the trainer's service
    name, the policy folder; None for what it had not). `Controller.failure_context` makes one."""

    facts: StopFacts
    state: RunState
    env: ResolvedEnv | None = None
    out: Path | None = None
    recovery: Recovery | None = None
    trainer: str | None = None
    policy_path: Path | str | None = None


async def last_checkpoint(run: FailureContext, exc: BaseException) -> str:
    """Save the run's current step when its trainer is alive and that step has no complete
    checkpoint yet; returns the newest checkpoint's folder, or why there is none."""
    recovery, step = run.recovery, run.state.step
    if recovery is None:
        return "none (the run failed while starting)"
    saved = complete_checkpoints(recovery.folder)
    newest = str(saved[-1]) if saved else None
    if isinstance(exc, ServiceFailed | ServiceRestarted) and exc.service == run.trainer:
        return f"{newest} (the last complete one)" if newest else "none (the trainer is gone)"
    if step == 0:
        return newest or "none (no step was trained)"
    if saved and saved[-1].name == f"step_{step:06d}":
        return str(saved[-1])
    try:
        return str(await recovery.save(step))
    except Exception as err:  # the trainer failed too: point at the last complete one
        return f"{newest or 'none'} (saving step {step} failed: {_first_line(err)})"


async def run_failed(exc: BaseException, run: FailureContext) -> RunFailed:
    """`exc` out of `Controller.run()` as a `RunFailed` (raise it `from exc`), after a last
    checkpoint attempt; the controller is shut down afterwards (`train`'s `finally`)."""
    state = run.state
    taught = None
    if isinstance(exc, NoTrainingSignal):
        taught = warm_start_kind(run.facts.warm_start, run.env)
    part, error = failed_part(exc, run.facts, state.counts, state.errors, taught)
    checkpoint = await last_checkpoint(run, exc)
    traces = run.out / "traces.jsonl" if run.out is not None else None
    kept = {
        "traces": str(traces) if traces is not None and traces.exists() else "none written",
        "checkpoint": checkpoint,
    }
    failed = RunFailed(part, error, state.step, kept)
    if run.out is not None and run.out.exists():
        outputs.write_summary(run.out, failure_summary(state, failed, run.policy_path))
    return failed


def failure_summary(
    state: RunState, failed: RunFailed, policy_path: Path | str | None
) -> dict[str, Any]:
    """summary.json of a run that failed: `failure` (the part, its error, the step and the one
    line the program prints) beside what the run reached (steps, evals, counts)."""
    failure = {"part": failed.part, "error": failed.error, "step": failed.step}
    return {"failure": {**failure, "line": failed.line()}, **_reached(state, policy_path)}


def write_stop_summary(run: FailureContext, exc: BaseException) -> None:
    """summary.json of a run a check stopped (`SetupError`: at step 0, no signal to start
    from, `run.stop_causes.check_start_signal`): `stopped` (the step and the one line the
    program prints) beside what the run reached. Nothing when no output folder was made."""
    if run.out is None or not run.out.exists():
        return
    stopped = {"step": run.state.step, "line": str(exc)}
    outputs.write_summary(run.out, {"stopped": stopped, **_reached(run.state, run.policy_path)})


def _reached(state: RunState, policy_path: Path | str | None) -> dict[str, Any]:
    return {
        "steps": state.step,
        "policy_version": state.version,
        "evals": state.evals,
        "counts": dict(state.counts),
        "policy_path": str(policy_path),
    }

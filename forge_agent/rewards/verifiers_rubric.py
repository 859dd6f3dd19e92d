"""A verifiers environment's rubric, scored in a judge's sandbox (`VerifiersEnv` uses it).

A rubric's reward functions read the policy's rollout, and some evaluate it: verifiers' own
`ReasoningGymEnv` scores with reasoning-gym's scorers, several of which `eval` the answer. So
the rubric runs in the judge server's forked sandbox (`forge_agent.rewards.judge`), which
loads the environment once: in goes the rollout's data (its state without the client) and the
ids of the calls that failed, out come named numbers: the reward, each metric, and each metric
scored again without the failed calls (`capped_metrics`, below).

A rubric that asks a model (verifiers' `JudgeRubric`) needs the network the sandbox does not
have; it is scored in the env worker as before (it reads the answer, it does not run it).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from forge_agent.rewards.judge import ScorerRef, judge_server

if TYPE_CHECKING:
    import verifiers as vf

__all__ = [
    "asks_a_model",
    "capped_metrics",
    "rubric_ref",
    "sandboxed_scores",
    "scorer",
    "signal_handlers_kept",
    "without_calls",
]

_NOT_DATA = ("client", "usage_tracker", "usage")  # the policy's client, live counters


def asks_a_model(rubric: vf.Rubric) -> bool:
    """The rubric (or one of its members) is verifiers' `JudgeRubric`: it calls a model."""
    import verifiers as vf

    if isinstance(rubric, vf.JudgeRubric):
        return True
    return any(asks_a_model(member) for member in getattr(rubric, "rubrics", None) or [])


def rubric_ref(module: str, env_args: dict[str, Any]) -> ScorerRef:
    """The judge server's reference to the rubric of `module` loaded with `env_args`."""
    return ScorerRef(f"{__name__}:scorer", (module, env_args))


def scorer(module: str, env_args: dict[str, Any]) -> Callable[[dict, list[str]], dict]:
    """In the judge server: the environment loaded once; its rubric as a scorer of a rollout's
    data and its failed call ids, giving ``reward``, ``metric/<name>`` and ``capped/<name>``."""
    import verifiers
    from verifiers.legacy.types import State

    with signal_handlers_kept():
        rubric = verifiers.load_environment(module, **env_args).rubric

    def score(rollout: dict[str, Any], failed: list[str]) -> dict[str, float]:
        state = State(rollout)
        asyncio.run(rubric.score_rollout(state))
        scores = {"reward": float(state.get("reward") or 0.0)}
        scores.update({f"metric/{k}": float(v) for k, v in (state.get("metrics") or {}).items()})
        if failed:
            capped = asyncio.run(capped_metrics(rubric, state, set(failed)))
            scores.update({f"capped/{k}": v for k, v in capped.items()})
        return scores

    return score


async def sandboxed_scores(
    module: str, env_args: dict[str, Any], state: vf.State, failed: set[str]
) -> tuple[dict[str, float], float, dict[str, float]]:
    """(metrics, reward, metrics without the failed calls) of a finished rollout, from its
    rubric in the judge's sandbox; raises as `JudgeServer.score` does."""
    ref = rubric_ref(module, env_args)
    rollout = {k: v for k, v in state.items() if k not in _NOT_DATA}
    scores = await judge_server().score_metrics(ref, rollout, sorted(failed))
    metrics = {k[len("metric/") :]: v for k, v in scores.items() if k.startswith("metric/")}
    capped = {k[len("capped/") :]: v for k, v in scores.items() if k.startswith("capped/")}
    return metrics, scores.get("reward", 0.0), capped


# ---------------------------------------------------------------------- scoring without them
def without_calls(messages: list[Any], failed: set[str]) -> list[Any]:
    """`messages` (verifiers' pydantic messages) with the failed calls taken out: their tool
    calls dropped from assistant messages and their tool messages removed."""
    out = []
    for message in messages:
        if getattr(message, "role", None) == "tool" and message.tool_call_id in failed:
            continue
        calls = getattr(message, "tool_calls", None)
        if calls:
            kept = [c for c in calls if c.id not in failed]
            if len(kept) != len(calls):
                message = message.model_copy(update={"tool_calls": kept or None})
        out.append(message)
    return out


async def capped_metrics(rubric: vf.Rubric, state: vf.State, failed: set[str]) -> dict[str, float]:
    """The rubric's scores of the rollout with its failed calls taken out (completion and each
    trajectory step's completion); `VerifiersEnv` pays the lower of these and the real ones."""
    stripped = copy.copy(state)
    stripped["completion"] = without_calls(list(state.get("completion") or []), failed)
    stripped["trajectory"] = [
        {**step, "completion": without_calls(list(step.get("completion") or []), failed)}
        for step in state.get("trajectory") or []
    ]
    await rubric.score_rollout(stripped)
    return {k: float(v) for k, v in (stripped.get("metrics") or {}).items()}


# ---------------------------------------------------------------------- building an env
_SIGNAL_LOCK = threading.Lock()


@contextlib.contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Build a verifiers environment without letting it take the process's signals.

    verifiers' `Environment` installs SIGINT and SIGTERM handlers when it is built (teardown,
    then exit 143). In an env worker those signals belong to the worker, and off the main
    thread (where env workers build envs) `signal.signal` raises. So while the environment is
    built, `signal.signal` leaves the handlers as they are (under a lock: one build at a time
    in a process). Its teardown still runs at exit (it registers an `atexit` hook too).
    """

    def keep(signum: int, handler: signal.Handlers | Callable | int | None) -> object:
        return signal.getsignal(signum)

    with _SIGNAL_LOCK:
        original, signal.signal = signal.signal, keep
        try:
            yield
        finally:
            signal.signal = original

"""A verifiers environment's rubric, scored in a judge's sandbox (`VerifiersEnv` uses it).

A rubric's reward functions read the policy's rollout, and some evaluate it: verifiers' own
`ReasoningGymEnv` scores with reasoning-gym's scorers, several of which `eval` the answer. So
the rubric runs in the judge server's forked sandbox (`forge_agent.sandbox.judge`), which
loads the environment once: in goes the rollout's data (its state without the client) and the
ids of the calls that failed, out come named numbers: the reward, each metric, and each metric
scored again without the failed calls (`verifiers_tools.capped_metrics`).

A rubric that asks a model (verifiers' `JudgeRubric`) needs the network the sandbox does not
have; it is scored in the env worker as before (it reads the answer, it does not run it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from forge_agent.sandbox.judge import ScorerRef, judge_server

__all__ = ["asks_a_model", "rubric_ref", "sandboxed_scores", "scorer"]

_NOT_DATA = ("client", "usage_tracker", "usage")  # the policy's client, live counters


def asks_a_model(rubric: Any) -> bool:
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

    from forge_agent.env.adapters.verifiers_tools import capped_metrics, signal_handlers_kept

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
    module: str, env_args: dict[str, Any], state: Any, failed: set[str]
) -> tuple[dict[str, float], float, dict[str, float]]:
    """(metrics, reward, metrics without the failed calls) of a finished rollout, from its
    rubric in the judge's sandbox; raises as `JudgeServer.score` does."""
    ref = rubric_ref(module, env_args)
    rollout = {k: v for k, v in state.items() if k not in _NOT_DATA}
    scores = await judge_server().score_metrics(ref, rollout, sorted(failed))
    metrics = {k[len("metric/") :]: v for k, v in scores.items() if k.startswith("metric/")}
    capped = {k[len("capped/") :]: v for k, v in scores.items() if k.startswith("capped/")}
    return metrics, scores.get("reward", 0.0), capped

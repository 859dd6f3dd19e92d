"""Scorers of a user's env that ask to run sandboxed (`forge_agent.rewards.judge`); the judge
server imports them by name, so they live in a module, not inside a test."""

from __future__ import annotations

import os
from typing import Any

from forge_agent.rewards.judge import sandboxed_scorer
from forge_agent.sandbox.base import Limits


@sandboxed_scorer
def evals_the_answer(answer: str, entry: dict[str, Any]) -> float:
    """A scorer that runs the policy's text, as several reasoning-gym scorers do."""
    return float(eval(answer) == entry["answer"])


@sandboxed_scorer(limits=Limits(wall_s=1.0, cpu_s=1.0))
def evals_the_answer_briefly(answer: str, entry: dict[str, Any]) -> float:
    """The same, with a one-second limit."""
    return float(eval(answer) == entry["answer"])


@sandboxed_scorer
def dies_on(answer: str, entry: dict[str, Any]) -> float:
    """A scorer whose process dies on one answer (a crash in a parser, say)."""
    if answer == "die":
        os._exit(3)
    return 1.0

"""What a run's two loops own and advance, in one value: the controller holds one `RunState`,
the loops update it, and the helpers that report on a run (a step's metrics, a failure's
summary, the loop's result) are handed it instead of reading the controller back."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunState"]


@dataclass
class RunState:
    """The run's position and its record so far.

    `step`: trainer steps taken; `version`: the newest policy version; `epoch`: advances when a
    restarted trainer goes back to a checkpoint (groups started in an older epoch are dropped);
    `counts`: training episodes' statuses and the loops' events (`status/<status>`,
    `groups_filtered`, ...); `errors`: the last training episode's error text per status;
    `evals`: each held-out evaluation's metrics, and `eval_errors` the last one's first error
    per status; `resumed_from`: the checkpoint position a `resume=true` run continued from.
    """

    step: int = 0
    version: int = 0
    epoch: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    errors: dict[str, str] = field(default_factory=dict)
    evals: list[dict[str, float]] = field(default_factory=list)
    eval_errors: dict[str, str] = field(default_factory=dict)
    resumed_from: dict[str, Any] | None = None

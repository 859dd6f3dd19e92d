"""What the training loop returns: `LoopResult`, what it measured, and `LoopClock`, its clock
(wall time, the trainer's busy time, the generators' busy time, evaluation kept out).

    clock = await LoopClock.start(services.generators)   # when the loop starts
    ... the loop ...
    result = LoopResult(steps, version, *await clock.stop(), ...)
    summary = outputs.run_summary(result, policy_path, resumed_from)   # summary.json
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forge_agent.observability.loop_timing import LoopTiming

if TYPE_CHECKING:
    from forge_agent.run.services import GeneratorReplicas

__all__ = ["LoopClock", "LoopResult"]


@dataclass
class LoopClock:
    """The training loop's clock: started with the loop (setup, the warm start and the actors,
    is not in it); `timing` measures its sections (`trainer_busy`, `eval`, ...)."""

    generators: Any  # the generator replicas (`GeneratorReplicas.busy_seconds`)
    started: float
    busy_at_start: float
    timing: LoopTiming = field(default_factory=LoopTiming)

    @classmethod
    async def start(cls, generators: GeneratorReplicas) -> LoopClock:
        return cls(generators, time.monotonic(), await generators.busy_seconds())

    async def stop(self) -> tuple[float, dict[str, float]]:
        """(wall seconds since the start, `LoopTiming.fractions`: where the loop's time went;
        the generators' busy seconds during evaluation left out)."""
        wall_s = time.monotonic() - self.started
        busy = await self.generators.busy_seconds() - self.busy_at_start
        busy -= self.timing.seconds["generator_busy_eval"]
        return wall_s, self.timing.fractions(busy, len(self.generators))


@dataclass(frozen=True)
class LoopResult:
    """What one run of the training loop measured (summary.json, `outputs.run_summary`)."""

    steps: int
    policy_version: int
    wall_s: float
    timing: dict[str, float]  # trainer busy / idle and generator busy fractions of the loop
    profile: dict[str, Any]  # per-phase seconds (`PhaseClock.summary`)
    evals: list[dict[str, float]]  # one entry per held-out evaluation
    counts: dict[str, int]  # statuses, dropped groups, restarts/<service>, ...
    restarts: dict[str, Any]  # service -> the causes of its restarts
    curriculum: dict[str, Any]  # the level reached, each move up (`Curriculum.summary`)

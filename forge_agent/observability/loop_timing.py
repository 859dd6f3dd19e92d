"""Where the training loop's time goes: trainer busy / idle, generator busy, eval excluded.

    timing = LoopTiming()
    with timing.measure("trainer_busy"):
        await trainer.train_step(...)
    timing.fractions(generator_busy_s)   # -> {"trainer_idle_frac": ..., ...}

Evaluation pauses training in both sync and async mode, so its time (and the generator's work
during it) is kept out of the fractions: they describe the training loop alone.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class LoopTiming:
    """Seconds per named section since construction (`clock`: seconds, monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def measure(self, name: str) -> Iterator[None]:
        t0 = self.clock()
        try:
            yield
        finally:
            self.seconds[name] += self.clock() - t0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds

    def loop_seconds(self) -> float:
        """Wall-clock seconds since the start, less the time spent evaluating."""
        return self.clock() - self.started - self.seconds["eval"]

    def fractions(self, generator_busy_s: float, num_generators: int = 1) -> dict[str, float]:
        """Trainer busy/idle and generator busy fractions of the training loop's wall-clock
        (`generator_busy_s`: the replicas' busy seconds outside evaluation, summed)."""
        loop = max(self.loop_seconds(), 1e-9)
        busy = self.seconds["trainer_busy"] / loop
        return {
            "train_loop_s": loop,
            "trainer_busy_frac": busy,
            "trainer_idle_frac": 1.0 - busy,
            "generator_busy_frac": generator_busy_s / (loop * max(num_generators, 1)),
        }

"""Training-loop time accounting: evaluation is kept out of the busy/idle fractions."""

from __future__ import annotations

from forge_agent.observability.loop_timing import LoopTiming


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fractions_exclude_evaluation_time():
    clock = Clock()
    timing = LoopTiming(clock)
    with timing.measure("eval"):
        clock.now += 20.0
    with timing.measure("trainer_busy"):
        clock.now += 3.0
    clock.now += 7.0  # the trainer waits for a batch
    f = timing.fractions(generator_busy_s=8.0, num_generators=1)
    # loop = 30 s of wall-clock less 20 s of evaluation
    assert f == {
        "train_loop_s": 10.0,
        "trainer_busy_frac": 0.3,
        "trainer_idle_frac": 0.7,
        "generator_busy_frac": 0.8,
    }


def test_generator_busy_is_per_replica():
    clock = Clock()
    timing = LoopTiming(clock)
    clock.now += 10.0
    assert timing.fractions(8.0, num_generators=2)["generator_busy_frac"] == 0.4

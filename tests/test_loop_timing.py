"""Training-loop time accounting: evaluation is kept out of the busy/idle fractions."""

from __future__ import annotations

import pytest

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


def test_the_loop_clock_leaves_the_generators_eval_work_out():
    import asyncio

    from forge_agent.run.loop_result import LoopClock

    class Replicas(list):
        busy = 5.0

        async def busy_seconds(self) -> float:
            return self.busy

    clock, replicas = Clock(), Replicas([0, 1])
    loop = asyncio.run(LoopClock.start(replicas))
    loop.timing = LoopTiming(clock)
    clock.now += 10.0
    replicas.busy += 8.0  # 8 replica-seconds of work since the start, 2 of them in evaluation
    loop.timing.add("generator_busy_eval", 2.0)
    wall_s, timing = asyncio.run(loop.stop())
    assert wall_s >= 0.0
    assert timing["generator_busy_frac"] == pytest.approx(6.0 / (10.0 * 2))

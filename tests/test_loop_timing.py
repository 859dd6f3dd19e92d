"""Training-loop time accounting: evaluation is kept out of the busy/idle fractions."""

from __future__ import annotations

import time

from forge_agent.loop_timing import LoopTiming


def test_fractions_exclude_evaluation_time():
    timing = LoopTiming()
    with timing.measure("eval"):
        time.sleep(0.2)
    with timing.measure("trainer_busy"):
        time.sleep(0.1)
    time.sleep(0.1)  # the trainer waits for a batch
    f = timing.fractions(generator_busy_s=0.15, num_generators=1)
    assert 0.18 < f["train_loop_s"] < 0.3  # the 0.2 s of evaluation is not in the loop
    assert abs(f["trainer_busy_frac"] + f["trainer_idle_frac"] - 1.0) < 1e-9
    assert 0.3 < f["trainer_busy_frac"] < 0.6
    assert 0.5 < f["generator_busy_frac"] < 0.85


def test_generator_busy_is_per_replica():
    timing = LoopTiming()
    time.sleep(0.1)
    one = timing.fractions(0.1, 1)["generator_busy_frac"]
    two = timing.fractions(0.1, 2)["generator_busy_frac"]
    assert abs(one - 2 * two) < 0.05

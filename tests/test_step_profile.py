"""The per-step phase profile: every instant charged to one phase, busy fractions with overlap."""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.observability.step_profile import PhaseClock, format_table


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_phases_of_a_step_add_up_to_its_wall_clock_with_priority_to_the_trainer():
    t = FakeClock()
    clock = PhaseClock(t)
    clock.start()
    clock.enter("generate")
    t.now = 2.0
    clock.enter("env")  # overlaps generation: still charged to generate
    t.now = 3.0
    clock.leave("generate")
    t.now = 3.5  # env alone
    clock.leave("env")
    t.now = 4.0  # nothing running
    with clock.phase("train"):
        clock.enter("generate")  # async mode: generation under training
        t.now = 5.0
        clock.leave("generate")
    with clock.phase("eval"):
        t.now = 7.0
    m = clock.step_metrics()
    assert m["profile/generate_s"] == 3.0
    assert m["profile/env_s"] == 0.5
    assert m["profile/idle_s"] == 0.5
    assert m["profile/train_s"] == 1.0
    assert m["profile/eval_s"] == 2.0
    assert m["profile/step_s"] == 7.0
    assert sum(m[f"profile/{p}_s"] for p in ("generate", "env", "idle", "train", "eval")) == 7.0
    # busy fractions over the loop without eval (5 s): generate 4 s, train 1 s
    assert m["profile/generator_busy_frac"] == pytest.approx(4.0 / 5.0)
    assert m["profile/trainer_busy_frac"] == pytest.approx(1.0 / 5.0)


def test_each_step_counts_only_its_own_time_and_the_summary_averages_steps():
    t = FakeClock()
    clock = PhaseClock(t)
    t.now = 100.0  # before start: not part of any step
    clock.start()
    for _ in range(2):
        with clock.phase("train"):
            t.now += 1.0
        t.now += 1.0
        clock.step_metrics()
    summary = clock.summary()
    assert summary["steps"] == 2 and summary["step_s"] == 2.0
    assert summary["phases"]["train"] == {"s_per_step": 1.0, "share": 0.5}
    assert "train" in format_table(summary)


def test_wrapped_generate_and_envs_are_charged_while_awaited():
    t = FakeClock()
    clock = PhaseClock(t)

    async def generate(ids, sampling, session):
        t.now += 1.0
        return "done"

    class Env:
        async def reset(self, task, seed=None):
            t.now += 0.25
            return [], []

    class Envs:
        size = 3

        async def acquire(self):
            return Env()

    async def run():
        clock.start()
        out = await clock.timed_generate(generate)([1], None, "s")
        env = await clock.timed_envs(Envs()).acquire()
        await env.reset({})
        return out, clock.timed_envs(Envs()).size

    assert asyncio.run(run()) == ("done", 3)
    m = clock.step_metrics()
    assert (m["profile/generate_s"], m["profile/env_s"]) == (1.0, 0.25)

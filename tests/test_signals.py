"""A Ctrl-C cancels the run's task; a cancel that an await swallows on the way (Python 3.11's
`asyncio.wait_for`, when the awaited call completes in the same loop turn) still stops the
training loop at its next step (`run.signals.raise_if_cancelled`). The whole run's Ctrl-C is
tests/test_controller.py::test_ctrl_c_shuts_the_whole_run_down."""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.run.signals import raise_if_cancelled


def test_a_cancel_swallowed_by_an_await_still_stops_the_loop_at_its_next_check():
    async def run() -> list:
        inner = asyncio.get_running_loop().create_future()
        steps: list = []

        async def training_loop() -> None:
            steps.append(await asyncio.wait_for(inner, 10))  # 3.11: the cancel is swallowed
            raise_if_cancelled()
            steps.append("went on")

        task = asyncio.create_task(training_loop())
        await asyncio.sleep(0)  # the loop now waits inside wait_for
        inner.set_result("step")  # the call completes ...
        task.cancel()  # ... in the same turn as the Ctrl-C
        with pytest.raises(asyncio.CancelledError):
            await task
        return steps

    assert "went on" not in asyncio.run(run())


def test_a_task_nobody_cancelled_goes_on():
    async def run() -> str:
        raise_if_cancelled()
        return "went on"

    assert asyncio.run(run()) == "went on"

"""Supervised services on real Monarch proc meshes: a SIGKILLed or SIGSTOPped actor process is
replaced, its children (like vLLM's engine core) die with it, and restarts are bounded."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time

import psutil
import pytest
from monarch.actor import ActorError, this_host

from forge_agent.run.supervision import (
    Service,
    ServiceFailed,
    ServiceRestarted,
    install_fault_hook,
)
from tests.supervised_worker import Worker


def _service(name: str, hooked: list, max_restarts: int = 2) -> Service:
    async def spawn():
        procs = this_host().spawn_procs(per_host={"procs": 1}, name=name)
        actor = procs.spawn("worker", Worker)
        await actor.setup.call_one()
        return procs, actor

    async def on_restart(actor):
        hooked.append(await actor.pids.call_one())

    return Service(
        name,
        spawn,
        deadlines={"slow": 3.0},
        on_restart=on_restart,
        max_restarts=max_restarts,
        restart_timeout_s=60,
    )


def run_async(fn):
    """Run the coroutine test `fn` in its own event loop."""
    return functools.wraps(fn)(lambda: asyncio.run(fn()))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _wait_gone(*pids: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids):
            return True
        await asyncio.sleep(0.2)
    return False


@run_async
async def test_a_killed_actor_is_replaced_and_its_children_die():
    install_fault_hook()
    hooked: list = []
    svc = _service("sup_kill", hooked)
    await svc.start()
    proc_pid, child_pid = await svc.pids.call_one()
    in_flight = asyncio.ensure_future(svc.slow.call_one(2.5))
    await asyncio.sleep(0.5)
    os.kill(proc_pid, signal.SIGKILL)
    with pytest.raises(ServiceRestarted, match="sup_kill restarted"):
        await in_flight
    new_proc, new_child = await svc.pids.call_one()
    assert (new_proc, new_child) == hooked[-1]  # the hook saw the replacement
    assert new_proc != proc_pid and svc.restarts == 1
    assert await _wait_gone(proc_pid, child_pid), "the dead proc's child process outlived it"
    with pytest.raises(ActorError, match="ordinary endpoint error"):
        await svc.fail.call_one()  # an endpoint's own error is not a death
    assert svc.restarts == 1
    await svc.stop()
    assert await _wait_gone(new_proc, new_child)


@run_async
async def test_a_hung_actor_is_killed_at_its_deadline_and_replaced():
    install_fault_hook()
    hooked: list = []
    svc = _service("sup_hang", hooked)
    await svc.start()
    proc_pid, child_pid = await svc.pids.call_one()
    os.kill(proc_pid, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(ServiceRestarted, match="deadline"):
        await svc.slow.call_one(0.1)
    assert time.monotonic() - started < 3.0 + 60  # deadline + restart, never forever
    assert await svc.slow.call_one(0.1) == "done"
    assert await _wait_gone(proc_pid, child_pid)
    assert svc.causes == ["slow() exceeded its 3s deadline (hung)"]
    await svc.stop()


@run_async
async def test_past_max_restarts_the_service_fails_naming_itself_and_each_cause():
    install_fault_hook()
    svc = _service("sup_bounded", [], max_restarts=0)
    await svc.start()
    proc_pid, child_pid = await svc.pids.call_one()
    os.kill(proc_pid, signal.SIGKILL)
    with pytest.raises(ServiceFailed, match=r"sup_bounded failed 1 times.*max_restarts=0"):
        await svc.pids.call_one()
    with pytest.raises(ServiceFailed):  # stays failed: no call reaches a dead actor
        await svc.slow.call_one(0.1)
    assert await _wait_gone(proc_pid, child_pid)


@run_async
async def test_a_replacement_that_cannot_start_fails_the_service_saying_so():
    """A lost host: the replacement's spawn raises; the service fails within its restarts,
    named as such (not as past max_restarts), and reports it as `failed`."""
    install_fault_hook()
    spawned = []

    async def spawn_once():
        if spawned:
            raise RuntimeError("host mesh 'gen' does not answer")
        procs = this_host().spawn_procs(per_host={"procs": 1}, name="sup_lost_host")
        spawned.append(procs.spawn("worker", Worker))
        await spawned[0].setup.call_one()
        return procs, spawned[0]

    svc = Service("sup_lost_host", spawn_once, max_restarts=3, restart_timeout_s=60)
    await svc.start()
    assert svc.failed is None
    proc_pid, _ = await svc.pids.call_one()
    os.kill(proc_pid, signal.SIGKILL)
    with pytest.raises(ServiceFailed, match=r"replacement could not start.*does not answer"):
        await svc.pids.call_one()
    assert isinstance(svc.failed, ServiceFailed) and "max_restarts" not in str(svc.failed)
    await svc.stop()

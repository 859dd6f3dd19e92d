"""A run that heals itself: one short run of the real stack in which the generator replica's
process is SIGKILLed, the reward actor's process is SIGKILLed, the trainer's process is
SIGKILLed after a checkpoint, and the (replacement) generator is frozen with SIGSTOP. The run
must finish its steps with weights and versions past every fault, count each restart with its
cause, and leave no process behind."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from forge_agent.run.config import load_config

FAULTS = ("generator SIGKILL", "reward SIGKILL", "trainer SIGKILL", "generator SIGSTOP")


async def _inject(controller, out: Path, log: list[tuple[str, int, int]]) -> None:
    """Each fault once the run is past the step it waits for (kills hit whatever the process
    is doing then: generating, scoring or training)."""

    async def until(predicate, what: str, timeout_s: float = 400.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"fault injector: waited too long for {what}")
            await asyncio.sleep(0.1)

    def hit(name: str, service, sig: signal.Signals) -> None:
        pid = service.mesh_pids[0]
        log.append((name, pid, controller.state.step))
        os.kill(pid, sig)

    gen = controller.services.generators[0]
    await until(
        lambda: controller.state.step >= 1 and controller.rollouts.open.is_set(), "step 1's sync"
    )
    # step 2's episodes are being generated (a fixed pause could fall between requests: the
    # tiny policy answers a group in well under a second): they die with it
    await until(lambda: controller.profile.active["generate"] > 0, "requests in flight")
    hit(FAULTS[0], gen, signal.SIGKILL)
    hit(FAULTS[1], controller.services.rewards, signal.SIGKILL)
    await until(lambda: (out / "checkpoints" / "step_000001" / "COMPLETE").exists(), "checkpoint")
    hit(FAULTS[2], controller.services.trainer, signal.SIGKILL)
    await until(lambda: controller.services.trainer.restarts >= 1, "the trainer's restart")
    await until(lambda: gen.restarts >= 1, "the generator's restart")
    await until(lambda: controller.state.step >= 2, "step 2 after the trainer restart")
    hit(FAULTS[3], gen, signal.SIGSTOP)


@pytest.fixture(scope="module")
def healing_run(policy_model_path, tmp_path_factory):
    """Three GRPO steps of the real stack with the four faults above; returns the summary,
    the faults as injected (name, pid, step), every process the run's services ever had, and
    the output folder."""
    from forge_agent.run.controller import Controller

    out = tmp_path_factory.mktemp("healing_run")
    cfg = load_config(
        None,
        [
            f"model.name={policy_model_path}",
            "warm_start.enabled=false",
            f"output_dir={out}",
            "training.steps=3",
            "training.groups_per_step=2",
            "training.group_size=4",
            "rollout.max_concurrent_episodes=8",
            "services.env.num_replicas=2",
            "eval.every=0",
            "checkpoint.every=1",
            "metrics.console=false",
            "supervision.generate_deadline_s=20",
            "training.weight_sync_timeout_s=20",
        ],
    )
    injected: list[tuple[str, int, int]] = []
    seen: set[int] = set()

    async def run() -> dict:
        controller = Controller(cfg)
        try:
            await controller.setup()
            injector = asyncio.create_task(_inject(controller, out, injected))

            async def watch() -> None:  # every process any service ever ran
                while True:
                    for s in controller.services.supervised:
                        seen.update(s.process_ids)
                    await asyncio.sleep(0.5)

            watcher = asyncio.create_task(watch())
            summary = await controller.run()
            watcher.cancel()
            if not injector.done():
                injector.cancel()
            else:
                injector.result()  # an injector error (a fault never reached) fails here
            return summary
        finally:
            await controller.shutdown()

    summary = asyncio.run(run())
    return summary, injected, seen, out


def test_every_fault_was_injected_and_the_run_finished_its_steps(healing_run):
    summary, injected, _, out = healing_run
    assert [name for name, _, _ in injected] == list(FAULTS)
    assert summary["steps"] == 3
    assert summary["policy_version"] == 3  # versions advanced past the restored checkpoint
    metrics = (out / "metrics.jsonl").read_text()
    assert '"restarts/total"' in metrics


def test_a_killed_generator_replica_is_replaced(healing_run):
    summary = healing_run[0]
    causes = summary["restarts"]["generator0"]
    assert "process died" in causes[0] or "deadline" in causes[0]
    assert summary["counts"]["status/generator_error"] > 0  # its in-flight episodes, marked


def test_a_frozen_generator_is_killed_at_its_deadline_and_replaced(healing_run):
    summary = healing_run[0]
    assert summary["counts"]["restarts/generator0"] == 2
    assert "exceeded its 20s deadline (hung)" in summary["restarts"]["generator0"][1]


def test_a_killed_reward_actor_is_replaced_and_scoring_goes_on(healing_run):
    summary = healing_run[0]
    assert summary["counts"]["restarts/reward"] == 1
    assert summary["counts"].get("reward_service_error", 0) == 0  # re-scored, not dropped


def test_a_killed_trainer_restarts_from_its_last_complete_checkpoint(healing_run):
    summary, _, _, out = healing_run
    assert summary["counts"]["restarts/trainer"] == 1
    assert "process died" in summary["restarts"]["trainer"][0]
    assert (out / "checkpoints" / "step_000003" / "COMPLETE").exists()  # trained on past it


def test_no_process_of_any_service_outlives_the_run(healing_run):
    _, injected, seen, _ = healing_run
    assert {pid for _, pid, _ in injected} <= seen
    deadline = time.monotonic() + 15
    alive = seen
    while alive and time.monotonic() < deadline:
        alive = {p for p in seen if _alive(p)}
        time.sleep(0.5)
    assert alive == set()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

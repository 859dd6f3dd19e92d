"""EnvPool: envs run in worker processes; hung, raising and dying envs become marked failures."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, ClassVar

import pytest

from forge_agent.env import Env, EnvConfig, EnvFailure, EnvPool
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.errors import InfraError
from forge_agent.types import Status, StepResult

pytestmark = pytest.mark.timeout(60)


class EchoEnv(Env):
    """Answers every message with its own pid; written with sync methods."""

    meeting = threading.Barrier(4, timeout=20)  # per worker process
    failure_reward = -0.5

    def reset(self, task: dict[str, Any], seed: int | None = None) -> tuple[list, list]:
        return [{"role": "user", "content": task.get("prompt", "hi")}], []

    def step(self, assistant_message: dict[str, Any]) -> StepResult:
        behaviour = assistant_message.get("content")
        if behaviour == "hang":
            time.sleep(3600)
        if behaviour == "raise":
            raise ValueError("the env broke on purpose")
        if behaviour == "infra":
            raise InfraError("the env's server is down")
        if behaviour == "exit":
            os._exit(3)
        if behaviour == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if behaviour == "meet":  # returns once 4 episodes of this process are in step()
            self.meeting.wait()
        if behaviour.startswith("nap"):  # "nap 2.5": sleeps that long
            time.sleep(float(behaviour.split()[1]))
        if behaviour == "print":
            print("env chatter on stdout must not corrupt the protocol")
        return StepResult([{"role": "user", "content": str(os.getpid())}], {"r": 1.0}, True, {})


ECHO = f"{__name__}:EchoEnv"


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


async def episode(pool: EnvPool, text: str) -> StepResult:
    async with pool.lease() as env:
        await env.reset({"prompt": "go"}, seed=0)
        return await env.step(say(text))


def test_episode_runs_in_a_worker_process() -> None:
    async def main() -> None:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig(ECHO, kwargs={}, step_timeout_s=10)), size=1
        ) as pool:
            result = await episode(pool, "ok")
            assert int(result.messages[0]["content"]) != os.getpid()
            assert result.rewards == {"r": 1.0} and result.done

    asyncio.run(main())


def test_worker_is_reused_across_episodes() -> None:
    async def main() -> None:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig(ECHO, kwargs={}, step_timeout_s=10)), size=1
        ) as pool:
            first = await episode(pool, "ok")
            second = await episode(pool, "print")
            assert first.messages == second.messages
            assert pool.stats["workers_started"] == 1

    asyncio.run(main())


@pytest.mark.parametrize(
    ("behaviour", "status", "text"),
    [
        ("hang", Status.POLICY_TIMEOUT, "did not finish within 1 s"),
        ("raise", Status.POLICY_ERROR, "ValueError: the env broke on purpose"),
        ("exit", Status.ENV_ERROR, "exit code 3"),
        ("sigkill", Status.ENV_ERROR, "killed by SIGKILL"),
    ],
)
def test_failed_step_is_marked_and_next_episode_runs_on_a_fresh_worker(
    behaviour: str, status: Status, text: str
) -> None:
    async def main() -> None:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig(ECHO, kwargs={}, step_timeout_s=1.0, reset_timeout_s=30)),
            size=1,
        ) as pool:
            start = time.monotonic()
            with pytest.raises(EnvFailure) as failure:
                await episode(pool, behaviour)
            assert time.monotonic() - start < 5
            assert failure.value.status is status
            assert text in failure.value.message
            before = pool.stats["workers_started"]
            result = await episode(pool, "ok")  # the pool recovered
            assert result.rewards == {"r": 1.0}
            assert pool.stats["workers_started"] == before + 1
            assert pool.stats["workers_replaced"] == 1

    asyncio.run(main())


def test_a_step_that_raises_infra_error_is_infra_not_the_policys_failure() -> None:
    async def main() -> None:
        async with EnvPool(ResolvedEnv.of(ECHO), size=1) as pool:
            with pytest.raises(EnvFailure) as failure:
                await episode(pool, "infra")
            assert failure.value.status is Status.ENV_ERROR
            assert "the env's server is down" in failure.value.message

    asyncio.run(main())


@pytest.mark.parametrize(("configured", "expected"), [(None, -0.5), (-2.0, -2.0)])
def test_a_policy_failure_carries_the_envs_failure_reward_or_the_configured_one(
    configured: float | None, expected: float
) -> None:
    async def main() -> None:
        env = EnvConfig(ECHO, kwargs={}, step_timeout_s=1.0, failure_reward=configured)
        async with EnvPool(ResolvedEnv.of(env), size=1) as pool:
            for behaviour in ("raise", "hang"):
                with pytest.raises(EnvFailure) as failure:
                    await episode(pool, behaviour)
                assert failure.value.status.is_policy_failure
                assert failure.value.reward == expected
            assert pool.stats["policy_errors"] == 1 and pool.stats["policy_timeouts"] == 1

    asyncio.run(main())


def test_lease_after_failure_keeps_failing_with_the_same_status() -> None:
    async def main() -> None:
        async with (
            EnvPool(ResolvedEnv.of(EnvConfig(ECHO, kwargs={}, step_timeout_s=0.5)), size=1) as pool,
            pool.lease() as env,
        ):
            await env.reset({}, 0)
            with pytest.raises(EnvFailure):
                await env.step(say("hang"))
            with pytest.raises(EnvFailure) as again:
                await env.step(say("ok"))
            assert again.value.status is Status.POLICY_TIMEOUT

    asyncio.run(main())


def test_pool_runs_episodes_concurrently_up_to_its_size() -> None:
    async def main() -> None:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig(ECHO, kwargs={}, step_timeout_s=10)), size=2
        ) as pool:
            await pool.start()
            results = await asyncio.gather(*(episode(pool, "ok") for _ in range(4)))
            pids = {r.messages[0]["content"] for r in results}
            assert len(pids) == 2 and pool.stats["workers_started"] == 2

    asyncio.run(main())


def test_registered_env_runs_in_pool() -> None:
    from envs.calculator import demonstration, generate_tasks

    async def main() -> None:
        task = generate_tasks(1, seed=3)[0]
        demo = demonstration(task)
        async with (
            EnvPool(
                ResolvedEnv.of(EnvConfig("calculator", kwargs={}, step_timeout_s=10)), size=1
            ) as pool,
            pool.lease() as env,
        ):
            messages, tools = await env.reset(task, 0)
            assert messages[-1]["content"] == task["prompt"] and tools
            await env.step(demo[2])
            result = await env.step(demo[4])
        assert result.rewards == {"correct": 1.0} and result.info["used_tool"]

    asyncio.run(main())


def test_env_failure_survives_pickling() -> None:
    import pickle

    failure = pickle.loads(pickle.dumps(EnvFailure(Status.ENV_TIMEOUT, "slow")))
    assert failure.status is Status.ENV_TIMEOUT and failure.message == "slow"


def test_worker_serves_its_envs_at_once_on_their_own_threads() -> None:
    """8 episodes on 2 workers of 4 envs: each returns only once the 4 envs of its worker are
    inside a blocking step at the same time."""

    async def main() -> None:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig(ECHO, kwargs={}, step_timeout_s=30)), size=8, envs_per_worker=4
        ) as pool:
            await pool.start()
            results = await asyncio.gather(*(episode(pool, "meet") for _ in range(8)))
            pids = [r.messages[0]["content"] for r in results]
            assert sorted(pids.count(p) for p in set(pids)) == [4, 4]
            assert pool.stats["workers_started"] == 2 and pool.num_workers == 2

    asyncio.run(main())


class LoopEnv(Env):
    """An async env whose class asks its worker for one shared event loop (unless built with
    `shared=False`); its step answers with the process and thread it ran on, once 4 episodes
    of its process are inside step at the same time."""

    inside: ClassVar[set[int]] = set()

    def __init__(self, shared: bool = True) -> None:
        self.shared = shared

    @staticmethod
    def shares_event_loop(shared: bool = True, **_: Any) -> bool:
        return shared

    async def reset(self, task: dict[str, Any], seed: int | None = None) -> tuple[list, list]:
        return [{"role": "user", "content": "go"}], []

    async def step(self, assistant_message: dict[str, Any]) -> StepResult:
        LoopEnv.inside.add(id(self))
        deadline = time.monotonic() + 20
        while len(LoopEnv.inside) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        where = f"{os.getpid()} {threading.get_ident()} {len(LoopEnv.inside)}"
        return StepResult([{"role": "user", "content": where}], {"r": 1.0}, True, {})


@pytest.mark.parametrize("shared", [True, False])
def test_envs_that_share_an_event_loop_run_their_episodes_as_tasks_on_one_thread(shared) -> None:
    """`shares_event_loop` (agent programs have it): the 4 envs of a worker run concurrently
    on one thread; with it false (an agent program's `blocking=True`), on a thread each."""

    async def main() -> None:
        env_kwargs = {"shared": shared}
        env = EnvConfig(f"{__name__}:LoopEnv", kwargs=env_kwargs)
        async with EnvPool(ResolvedEnv.of(env), size=4, envs_per_worker=4) as pool:
            results = await asyncio.gather(*(episode(pool, "go") for _ in range(4)))
            where = [r.messages[0]["content"].split() for r in results]
            assert {pid for pid, _, _ in where} != {str(os.getpid())}
            assert len({pid for pid, _, _ in where}) == 1  # one worker process
            assert all(int(met) == 4 for _, _, met in where)  # all 4 were in step at once
            assert len({thread for _, thread, _ in where}) == (1 if shared else 4)

    asyncio.run(main())


class SharingEnv(LoopEnv):
    """Its episodes on one event loop share a socket pair, which `close_shared` closes."""

    pairs: ClassVar[dict[Any, Any]] = {}  # event loop -> its socket pair, per process

    async def reset(self, task: dict[str, Any], seed: int | None = None) -> tuple[list, list]:
        loop = asyncio.get_running_loop()
        if loop not in SharingEnv.pairs:
            SharingEnv.pairs[loop] = socket.socketpair()
        return [{"role": "user", "content": "go"}], []

    async def step(self, assistant_message: dict[str, Any]) -> StepResult:
        return StepResult([], {"r": 1.0}, True, {})

    @staticmethod
    async def close_shared() -> None:
        for end in SharingEnv.pairs.pop(asyncio.get_running_loop(), ()):
            end.close()
        print("closed what a loop's episodes shared", file=sys.stderr)


@pytest.mark.parametrize("shared", [True, False])
def test_a_closed_pool_leaves_no_event_loop_or_shared_resource_unclosed(
    shared, capfd, monkeypatch
) -> None:
    """The worker closes each event loop at exit, after `close_shared` released what its
    episodes shared: nothing unclosed for the interpreter to find (and warn of) at shutdown."""
    monkeypatch.setenv("PYTHONWARNINGS", "always::ResourceWarning")  # in the worker too

    async def main() -> None:
        env = EnvConfig(f"{__name__}:SharingEnv", kwargs={"shared": shared})
        async with EnvPool(ResolvedEnv.of(env), size=2, envs_per_worker=2) as pool:
            await asyncio.gather(episode(pool, "go"), episode(pool, "go"))

    asyncio.run(main())
    err = capfd.readouterr().err
    assert err.count("closed what a loop's episodes shared") == (1 if shared else 2), err
    assert "ResourceWarning" not in err and "Exception ignored" not in err, err


def test_a_hung_env_fails_alone_and_its_worker_is_replaced_after_its_other_episodes() -> None:
    async def main() -> None:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig(ECHO, kwargs={}, step_timeout_s=2.5)),
            size=3,
            envs_per_worker=3,
        ) as pool:
            await pool.start()

            async def late_nap() -> StepResult:
                await asyncio.sleep(1.2)  # still running when the hung step times out
                return await episode(pool, "nap 2")

            hung, *fine = await asyncio.gather(
                episode(pool, "hang"), late_nap(), late_nap(), return_exceptions=True
            )
            assert isinstance(hung, EnvFailure) and hung.status is Status.POLICY_TIMEOUT
            assert all(r.rewards == {"r": 1.0} for r in fine)  # same worker, unharmed
            assert pool.stats["workers_replaced"] == 1  # retired once its episodes ended
            again = await episode(pool, "ok")
            assert again.messages[0]["content"] != fine[0].messages[0]["content"]

    asyncio.run(main())


def test_a_dying_worker_marks_every_episode_it_was_running() -> None:
    async def main() -> None:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig(ECHO, kwargs={}, step_timeout_s=20)), size=3, envs_per_worker=3
        ) as pool:
            await pool.start()

            async def killer() -> StepResult:
                await asyncio.sleep(0.5)  # the naps are inside step by then
                return await episode(pool, "sigkill")

            outcomes = await asyncio.gather(
                episode(pool, "nap 3"), episode(pool, "nap 3"), killer(), return_exceptions=True
            )
            for outcome in outcomes:
                assert isinstance(outcome, EnvFailure), outcome
                assert outcome.status is Status.ENV_ERROR
                assert "killed by SIGKILL" in outcome.message
            assert (await episode(pool, "ok")).rewards == {"r": 1.0}

    asyncio.run(main())

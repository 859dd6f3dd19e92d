"""Env workers behind an `EnvPoolActor` (how a run places them on another host): episodes
run in the actor's env workers, and an env failure there reaches the rollout side as the same
`EnvFailure` status. Here the actor's proc is local; tests/test_multihost_training.py runs
it on another network host."""

from __future__ import annotations

import asyncio
import os

import pytest

from forge_agent.env import EnvFailure, ResolvedEnv
from forge_agent.env.remote_pool import EnvPoolActor, RemoteEnvs
from forge_agent.types import Status
from tests.helpers import spawn_test_procs
from tests.test_env_worker import ECHO, say

pytestmark = pytest.mark.timeout(90)


def test_remote_episodes_run_in_the_actors_workers_and_keep_failure_statuses():
    procs = spawn_test_procs(1)

    async def main() -> None:
        actor = procs.spawn(
            "env_pool",
            EnvPoolActor,
            ResolvedEnv.of(ECHO, step_timeout_s=1.0, reset_timeout_s=30.0),
            workers=1,
            per_core=8,
            envs_per_worker=2,
        )
        envs = await RemoteEnvs.start(actor)
        assert (envs.size, envs.num_workers) == (2, 1) and envs.where["pid"] != os.getpid()
        env = await envs.acquire()
        await env.reset({"prompt": "go"}, 0)
        result = await env.step(say("ok"))
        await env.close()
        assert result.done and result.rewards == {"r": 1.0}
        assert int(result.messages[0]["content"]) not in (os.getpid(), envs.where["pid"])
        env = await envs.acquire()
        await env.reset({"prompt": "go"}, 0)
        with pytest.raises(EnvFailure) as failure:
            await env.step(say("hang"))
        await env.close()
        assert failure.value.status is Status.POLICY_TIMEOUT  # with its failure reward, too
        assert failure.value.reward == -0.5  # EchoEnv's, carried across the actor
        assert "did not finish within 1 s" in failure.value.message
        await envs.close()

    try:
        asyncio.run(main())
    finally:
        procs.stop().get()

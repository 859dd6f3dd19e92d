"""Agent programs (the real `openai` client in env worker processes) as episodes of the
rollout engine, against the real vLLM CPU engine: groups, rewards, statuses."""

from __future__ import annotations

import asyncio

import pytest

from envs.calculator import generate_tasks
from forge_agent.endpoint import EndpointServer
from forge_agent.endpoint.agents import AgentRolloutEngine, agent_env_spec
from forge_agent.env import EnvPool
from forge_agent.generator import GeneratorConfig
from forge_agent.rollout import ChatRenderer, RolloutConfig
from forge_agent.types import Status


def _generate(generator):
    return lambda ids, sampling, session: generator.generate.call_one(ids, sampling, session)


def _run(generator, tiny_tokenizer, program: str, group_size: int, reset_timeout_s: float = 60):
    spec = agent_env_spec(
        f"agent:tests.endpoint_agents:{program}", "tests.endpoint_agents:calculator_reward"
    )
    task = generate_tasks(1, seed=31)[0]

    async def run():
        server = EndpointServer(
            _generate(generator), ChatRenderer(tiny_tokenizer), GeneratorConfig().max_model_len
        )
        async with server, EnvPool(spec, size=2, reset_timeout_s=reset_timeout_s) as pool:
            engine = AgentRolloutEngine(server, pool, config=RolloutConfig())
            group = await engine.run_group(task, 0, group_size)
            again = await engine.run_episode(task, 0)  # the pool still serves afterwards
            return group, again, len(server.endpoint.sessions)

    return asyncio.run(run())


def test_agent_program_groups_are_recorded_and_scored(generator, tiny_tokenizer):
    group, again, open_sessions = _run(generator, tiny_tokenizer, "calculator_agent", 4)
    assert open_sessions == 0  # every episode's key was closed
    assert len(group.trajectories) == 4
    for traj in [*group.trajectories, again]:
        assert traj.status == Status.OK, traj.info
        assert set(traj.reward_components) == {"correct"}
        assert traj.reward in (0.0, 1.0)
        assert traj.turn_spans and traj.num_sampled > 0
        n = len(traj.token_ids)
        assert len(traj.loss_mask) == len(traj.logprobs) == len(traj.versions) == n
        sampled = {i for s, e in traj.turn_spans for i in range(s, e)}
        assert {i for i, m in enumerate(traj.loss_mask) if m} == sampled
        assert all(traj.versions[i] >= 0 for i in sampled)
        assert traj.messages[-1]["role"] == "assistant"
    assert len({t.group_id for t in group.trajectories}) == 1


@pytest.mark.parametrize(
    ("program", "status", "timeout"),
    [("raising_agent", Status.ENV_ERROR, 60.0), ("hanging_agent", Status.ENV_TIMEOUT, 2.0)],
)
def test_agent_program_failures_become_statuses(
    generator, tiny_tokenizer, program, status, timeout
):
    group, again, open_sessions = _run(generator, tiny_tokenizer, program, 2, timeout)
    assert open_sessions == 0
    for traj in [*group.trajectories, again]:
        assert traj.status == status, traj.info
        assert status.is_infra_failure  # excluded from baselines and losses
    if program == "raising_agent":
        assert "the agent program broke" in group.trajectories[0].info["error"]
        assert group.trajectories[0].num_sampled > 0  # its one request was still recorded

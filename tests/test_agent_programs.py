"""Agent programs (the real `openai` client in env worker processes) as episodes of the
rollout engine, against the real vLLM CPU engine: groups, statuses, and rewards computed by a
real reward actor (as a training run scores them)."""

from __future__ import annotations

import asyncio
import functools

import pytest

from envs.calculator import generate_tasks
from envs.calculator.env import extract_answer
from forge_agent.endpoint import EndpointServer
from forge_agent.endpoint.agents import AgentRolloutRunner
from forge_agent.env import EnvConfig, EnvPool
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.generator import GeneratorConfig
from forge_agent.rewards.build import AGENT_REWARD, build_rubric
from forge_agent.rollout import ChatRenderer, RolloutConfig
from forge_agent.types import Status
from tests.helpers import spawn_test_procs


def _generate(generator):
    return lambda ids, sampling, session: generator.generate.call_one(ids, sampling, session)


def _run(generator, tiny_tokenizer, program: str, group_size: int, reset_timeout_s: float = 60):
    env = EnvConfig(
        f"agent:tests.endpoint_agents:{program}",
        kwargs={"reward": "tests.endpoint_agents:calculator_reward"},
        reset_timeout_s=reset_timeout_s,
    )
    task = generate_tasks(1, seed=31)[0]

    async def run():
        server = EndpointServer(
            _generate(generator), ChatRenderer(tiny_tokenizer), GeneratorConfig().max_model_len
        )
        async with server, EnvPool(ResolvedEnv.of(env), size=2) as pool:
            engine = AgentRolloutRunner(server, pool, config=RolloutConfig())
            group = await engine.run_group(task, 0, group_size)
            (again,) = await engine.run_episode(task, 0)  # the pool still serves afterwards
            return group, again, len(server.endpoint.sessions)

    return asyncio.run(run())


def _score_in_reward_actor(trajectories):
    """Score as the controller does for `env.id=agent:...`: its rubric in a reward actor."""
    from forge_agent.rewards.actor import RewardActor

    procs = spawn_test_procs(1)
    try:
        rubric = functools.partial(build_rubric, {}, 512, "tests.endpoint_agents:calculator_reward")
        actor = procs.spawn("reward", RewardActor, rubric)
        actor.setup.call().get()
        return actor.score.choose(trajectories).get()
    finally:
        procs.stop().get()


def test_agent_program_groups_are_recorded_and_scored(generator, tiny_tokenizer):
    group, again, open_sessions = _run(generator, tiny_tokenizer, "calculator_agent", 4)
    assert open_sessions == 0  # every episode's key was closed
    assert len(group.trajectories) == 4
    for traj in [*group.trajectories, again]:  # the engine runs no reward: the actor does
        assert traj.reward == 0.0 and not traj.reward_components, traj.reward_components
    scored, metrics = _score_in_reward_actor([*group.trajectories, again])
    expected = []
    for traj in scored:
        given = extract_answer(str(traj.info["result"] or ""))
        right = given is not None and int(given) == int(traj.info["task"]["answer"])
        expected.append(float(right))
    assert [t.reward for t in scored] == expected
    for traj, value in zip(scored, expected, strict=True):
        assert traj.info["reward_breakdown"] == {f"{AGENT_REWARD}/correct": value}
    assert metrics[f"reward/{AGENT_REWARD}/correct"] == pytest.approx(sum(expected) / 5)
    for traj in scored:
        assert traj.status == Status.OK, traj.info
        assert traj.info["result"] is not None and traj.info["task"]["task_id"]
        assert traj.turn_spans and traj.num_sampled > 0
        calls = [
            c for m in traj.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
        ]
        assert traj.tool_call_count == len(calls)  # tools/call_rate counts programs' calls too
        n = len(traj.token_ids)
        assert len(traj.loss_mask) == len(traj.logprobs) == len(traj.versions) == n
        sampled = {i for s, e in traj.turn_spans for i in range(s, e)}
        assert {i for i, m in enumerate(traj.loss_mask) if m} == sampled
        assert all(traj.versions[i] >= 0 for i in sampled)
        assert traj.messages[-1]["role"] == "assistant"
    assert len({t.group_id for t in group.trajectories}) == 1


@pytest.mark.parametrize(
    ("program", "status", "timeout"),
    [
        ("raising_before_asking_agent", Status.ENV_ERROR, 60.0),
        ("hanging_agent", Status.ENV_TIMEOUT, 2.0),
    ],
)
def test_agent_program_failures_the_policy_cannot_cause_are_infra(
    generator, tiny_tokenizer, program, status, timeout
):
    group, again, open_sessions = _run(generator, tiny_tokenizer, program, 2, timeout)
    assert open_sessions == 0
    for traj in [*group.trajectories, again]:
        assert traj.status == status, traj.info
        assert status.is_infra_failure  # excluded from baselines and losses
    if program == "raising_before_asking_agent":
        assert "broke before asking" in group.trajectories[0].info["error"]


def test_a_program_that_raises_on_the_policys_answer_is_the_policys_failure(
    generator, tiny_tokenizer
):
    group, again, open_sessions = _run(generator, tiny_tokenizer, "raising_agent", 2)
    assert open_sessions == 0
    for traj in [*group.trajectories, again]:
        assert traj.status == Status.POLICY_ERROR, traj.info  # scored and trained on
        assert "the agent program broke" in traj.info["error"]
        assert traj.num_sampled > 0  # its one request was recorded
        assert traj.reward == 0.0 and traj.reward_components == {"policy_failure": 0.0}
    scored, _ = _score_in_reward_actor(group.trajectories)
    assert [t.reward for t in scored] == [0.0, 0.0]  # the rubric pays it the failure reward only


def test_programs_share_one_loopback_http_client_per_loop_until_one_closes_it():
    """Episodes in one env worker reuse the loopback HTTP client (kept-alive connections); a
    program that closes its openai client gets a fresh one next episode, not a dead one."""
    from forge_agent.env.adapters.agent_program import loopback_http_client, program_client

    async def episodes():
        shared = loopback_http_client()
        assert loopback_http_client() is shared
        client = program_client("http://127.0.0.1:9/v1", "key-2")
        assert client.api_key == "key-2"
        await client.close()  # as `async with client:` in a program does
        assert shared.is_closed
        fresh = loopback_http_client()
        assert fresh is not shared and not fresh.is_closed
        return fresh

    one, other = asyncio.run(episodes()), asyncio.run(episodes())
    assert one is not other  # a client is never shared across event loops


def test_an_env_workers_loop_closes_its_loopback_http_client_with_it():
    """`AgentProgramEnv.close_shared` (the env worker awaits it before closing a loop) closes
    the loop's loopback client, so no aiohttp session is collected unclosed at exit."""
    from forge_agent.env.adapters.agent_program import AgentProgramEnv, loopback_http_client

    async def closing() -> None:
        shared = loopback_http_client()
        await AgentProgramEnv.close_shared()
        assert shared.is_closed and loopback_http_client() is not shared
        await AgentProgramEnv.close_shared()

    asyncio.run(closing())

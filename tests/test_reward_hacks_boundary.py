"""The reward-hack suite's boundary cases: policy output that no later stage may choke on.

A tool call whose name is not a string or holds a lone surrogate: the renderer
turns each into a failed call (a `parse_error` the policy reads) at parse time, so no later
stage (the next render, the pickle to the env worker, the trace file) can fail on it and make
it infra. And a reward function that judges the policy's answer (an agent program's) raising
on it is the policy's failure, not a reward error dropped as infra.
"""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.algorithms.advantages import compute_advantages
from forge_agent.env import EnvConfig
from forge_agent.env.pool import EnvPool
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.observability.traces import TraceWriter, read_traces
from forge_agent.rewards.build import build_rubric
from forge_agent.types import Group, Status, Trajectory
from tests.helpers import ScriptPolicy

TASK = {"task_id": "t0", "prompt": "What is 78 * 52?", "answer": "4056", "expression": "78 * 52"}


def _call(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


BAD_CALLS = {
    "name-a-number": _call('{"name": 5, "arguments": {"expression": "1"}}'),
    "name-a-list": _call('{"name": ["calculator"], "arguments": {}}'),
    "name-a-lone-surrogate": _call('{"name": "calc\\udc00", "arguments": {}}'),
    "argument-a-lone-surrogate": _call(
        '{"name": "calculator", "arguments": {"expression": "1\\ud800"}}'
    ),
}


@pytest.mark.parametrize("call", list(BAD_CALLS.values()), ids=list(BAD_CALLS))
def test_a_tool_call_no_stage_could_handle_is_a_failed_call_not_infra(
    tiny_tokenizer, tmp_path, call
):
    """Before: a name that is a number or list made the next full render (a rewritten
    context) raise (`env_error`, excluded); a surrogate name did too; an argument with a lone
    surrogate reached the tool."""
    from forge_agent.rollout import ChatRenderer, RolloutConfig, RolloutRunner
    from forge_agent.rollout.config import ContextConfig

    async def run() -> Trajectory:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig("calculator", {"difficulty": 1})), size=1
        ) as pool:
            policy = ScriptPolicy(tiny_tokenizer, [call, r"\boxed{4056}"])
            config = RolloutConfig(  # a prompt past 64 tokens is rewritten: a full render
                max_turns=3,
                max_total_tokens=2048,
                max_new_tokens_per_turn=512,
                context=ContextConfig(strategy="drop_tool_outputs", budget=64),
            )
            engine = RolloutRunner(policy, pool, ChatRenderer(tiny_tokenizer), config)
            return await engine.run_episode(TASK, 0)

    (traj,) = asyncio.run(run())
    assert traj.status is Status.OK, traj.info.get("error")
    (reply,) = [m["content"] for m in traj.messages if m.get("role") == "tool"]
    assert reply.startswith("Error:"), reply
    assert traj.tool_error_count == 1 and traj.reward == 1.0
    with TraceWriter(tmp_path / "traces.jsonl") as writer:
        writer.write(traj)
    assert read_traces(tmp_path / "traces.jsonl")[0]["status"] == "ok"


def test_the_trace_writer_writes_a_lone_surrogate_as_a_replacement_character(tmp_path):
    """Before: `UnicodeEncodeError` out of `TraceWriter.write` ended the run."""
    traj = Trajectory(task_id="t", group_id="g")
    traj.messages = [{"role": "assistant", "content": "ok \ud800 then"}]
    traj.info["answer"] = "\udcff"
    with TraceWriter(tmp_path / "traces.jsonl") as writer:
        writer.write(traj)
    (record,) = read_traces(tmp_path / "traces.jsonl")
    assert record["messages"][0]["content"] == "ok \ufffd then"
    assert record["info"]["answer"] == "\ufffd"


def test_the_trace_writer_keeps_a_record_it_cannot_serialize_short(tmp_path):
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    traj = Trajectory(task_id="t", group_id="g")
    traj.info["result"] = nested
    with TraceWriter(tmp_path / "traces.jsonl") as writer:
        writer.write(traj)
    (record,) = read_traces(tmp_path / "traces.jsonl")
    assert record["task_id"] == "t" and "RecursionError" in record["trace_error"]


def _agent_episode(result: str) -> Trajectory:
    traj = Trajectory(task_id="t0", group_id="g", turn_spans=[(0, 1)], turn_rewards=[0.0])
    traj.info.update(task=TASK, result=result)
    return traj


def test_an_agent_programs_reward_raising_on_the_answer_is_the_policys_failure():
    """Before: `int(",")` in the program's reward made `reward_errors`, which the advantage
    step drops as infra: the old `\\boxed{,}` exclusion, back through the rubric."""
    rubric = build_rubric({}, agent_reward="tests.endpoint_agents:calculator_reward")
    raised, wrong, solved = (
        _agent_episode(r) for r in (r"\boxed{,}", r"\boxed{1}", r"\boxed{4056}")
    )
    _assert_the_raise_is_the_policys(rubric, raised, wrong, solved)


def test_an_agent_programs_failed_reward_scores_the_envs_failure_reward():
    rubric = build_rubric(
        {"tool_use": 0.5},
        agent_reward="tests.endpoint_agents:calculator_reward",
        failure_reward=-1.0,
    )
    raised = _agent_episode(r"\boxed{,}")
    asyncio.run(rubric.score_all([raised]))
    assert raised.reward == -1.0 and raised.info["reward_breakdown"] == {"policy_failure": -1.0}


def stated_confidence(traj: Trajectory) -> float:
    """A user's reward component: the confidence the answer states ("Confidence: 0.9"),
    parsed with `float`, so an answer stating "high" makes it raise."""
    text = traj.messages[-1]["content"]
    return float(text.split("Confidence:", 1)[1].split()[0])


def test_a_user_reward_component_raising_on_the_answer_is_the_policys_failure(tiny_tokenizer):
    """Before (main 475abf9): `float("high")` in a `rewards.components` function made
    `reward_errors`, which the advantage step drops as infra: an answer that breaks the
    judge escaped its group's baseline. Now it is `policy_error`, at the env's failure reward,
    and trained on."""
    from forge_agent.rollout import ChatRenderer, RolloutConfig, RolloutRunner

    texts = ["Confidence: high \\boxed{4056}", "Confidence: 0.5 \\boxed{1}",
             "Confidence: 0.5 \\boxed{4056}"]  # fmt: skip

    async def run() -> list[Trajectory]:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig("calculator", {"difficulty": 1})), size=1
        ) as pool:
            config = RolloutConfig(max_turns=1, max_total_tokens=2048, max_new_tokens_per_turn=256)
            runners = [
                RolloutRunner(ScriptPolicy(tiny_tokenizer, [t]), pool,
                              ChatRenderer(tiny_tokenizer), config)
                for t in texts
            ]  # fmt: skip
            played = await asyncio.gather(*(e.run_episode(TASK, 0) for e in runners))
            return [traj for (traj,) in played]

    raised, wrong, solved = asyncio.run(run())
    component = "tests.test_reward_hacks_boundary:stated_confidence"
    rubric = build_rubric({component: 0.1})
    _assert_the_raise_is_the_policys(rubric, raised, wrong, solved)


def down_judge(traj: Trajectory) -> float:
    from forge_agent.errors import InfraError

    raise InfraError("the judge model's endpoint is down")


def test_a_user_reward_component_raising_infra_error_stays_a_reward_error():
    rubric = build_rubric({"tests.test_reward_hacks_boundary:down_judge": 0.1})
    traj = _agent_episode(r"\boxed{1}")
    traj.info["reward_components"] = {"correct": 1.0}
    asyncio.run(rubric.score_all([traj]))
    assert (
        traj.status is Status.OK
        and "InfraError"
        in traj.info["reward_errors"]["tests.test_reward_hacks_boundary:down_judge"]
    )


def _assert_the_raise_is_the_policys(rubric, raised, wrong, solved) -> None:
    """Scored by `rubric`, the episode whose answer made a reward function raise is the
    policy's failure: `policy_error`, reward 0, kept and trained on below its group."""
    asyncio.run(rubric.score_all([raised, wrong, solved]))
    assert raised.status is Status.POLICY_ERROR and "ValueError" in raised.info["error"]
    assert raised.reward == 0.0 and "reward_errors" not in raised.info
    kept, stats = compute_advantages([Group("t0", [raised, wrong, solved])])
    assert raised in kept and stats.dropped.get("infra_failure", 0) == 0
    assert raised.advantage < 0 < solved.advantage


@pytest.mark.parametrize(
    ("program", "status"),
    [("slow_tools_agent", Status.POLICY_TIMEOUT), ("hanging_agent", Status.ENV_TIMEOUT)],
)
def test_class9_an_agent_programs_slow_tool_calls_are_the_policys_timeout(
    tiny_tokenizer, program, status
):
    """Before (c257d3d): an agent program pushed past `reset_timeout_s` by the policy's own
    slow tool calls ended `env_timeout`, excluded. Now a program past its deadline after the
    policy answered, with no request in the generator, is the policy's timeout (scored at the
    failure reward, trained on); one that never asked stays infra."""
    from envs.calculator import generate_tasks
    from forge_agent.endpoint.agents import AgentRolloutRunner
    from forge_agent.endpoint.server import EndpointServer
    from forge_agent.rollout import ChatRenderer, RolloutConfig
    from tests.helpers import SaysPolicy

    env = EnvConfig(
        f"agent:tests.endpoint_agents:{program}",
        kwargs={"reward": "tests.endpoint_agents:calculator_reward"},
        reset_timeout_s=6.0,  # the worker's start has it too: room for a loaded machine
    )
    task = generate_tasks(1, seed=31)[0]

    async def run():
        policy = SaysPolicy(tiny_tokenizer, "42")
        server = EndpointServer(policy, ChatRenderer(tiny_tokenizer), 2048)
        async with server, EnvPool(ResolvedEnv.of(env), size=1) as pool:
            (traj,) = await AgentRolloutRunner(server, pool, config=RolloutConfig()).run_episode(
                task, 0
            )
            return traj

    traj = asyncio.run(run())
    assert traj.status is status, traj.info
    if status is Status.POLICY_TIMEOUT:
        assert traj.reward == 0.0 and traj.num_sampled > 0

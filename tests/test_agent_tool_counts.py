"""An agent program's episode counts the tool calls its policy sampled (`tool_call_count`,
hence `tools/call_rate` and `eval/tool_call_rate`), as env episodes do."""

from __future__ import annotations

from forge_agent.endpoint.session import Candidate, Session, Turn
from forge_agent.types import Completion, Trajectory


def _candidate(ids: list[int], message: dict) -> Candidate:
    completion = Completion(ids, [-0.5] * len(ids), "stop", policy_version=3)
    return Candidate(completion, message, cut=len(ids))


def test_sampled_tool_calls_are_counted_on_the_recorded_trajectory():
    session = Session(key="k", session_id="s", trajectory=Trajectory("task", "group"))
    user = [{"role": "user", "content": "What is 2 + 3?"}]
    call = {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    asks = {"role": "assistant", "content": "", "tool_calls": [call, {**call, "id": "c1"}]}
    session.commit(Turn([1, 2], [1, 2], True, user, None), [_candidate([7, 8], asks)])
    history = [*user, asks, {"role": "tool", "tool_call_id": "c0", "content": "5"}]
    answer = {"role": "assistant", "content": "5"}
    session.commit(Turn([1, 2, 7, 8, 9], [9], False, history, None), [_candidate([5], answer)])
    traj = session.finish()
    assert traj.tool_call_count == 2  # two calls in the first reply, none in the answer
    assert len(traj.turn_spans) == 2

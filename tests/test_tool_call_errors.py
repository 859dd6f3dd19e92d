"""Hostile tool calls (issue 12, defects 5, 6 and 9): every parse, cut and bridge step of an
episode stays under the engine's failure policy, and the model is told precisely what is wrong.

The completions are scripted: a stand-in for a policy that samples exactly these tokens (vLLM
would only sample them by chance). Everything after the tokens is real: the project's tiny
tokenizer, the `renderers` parser, the rollout engine, the ToolSet, the files tools and a
bubblewrap sandbox session.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from forge_agent.env import ToolEnv
from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutConfig, RolloutRunner
from forge_agent.sandbox import make_sandbox
from forge_agent.toolkit.toolset import ToolSet
from forge_agent.types import Completion, Status
from tools.files import read_file, write_file


class FilesEnv(ToolEnv):
    """Files tools in a real bubblewrap session; any final answer scores 1."""

    tools = (write_file, read_file)

    def make_sandbox(self):
        return make_sandbox("bwrap").session()

    def judge(self, answer: str):
        return {"answered": 1.0}


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


def _ids(renderer: ChatRenderer, text: str) -> list[int]:
    return renderer.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)


def _call(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def _scripted(renderer: ChatRenderer, texts: list[str]):
    """A generate function that answers each turn with the next scripted text."""
    queue = list(texts)

    async def generate(prompt_ids, sampling, session):
        ids = _ids(renderer, queue.pop(0) if queue else "done")
        return Completion(ids, [0.0] * len(ids), "stop", 0)

    return generate


def _episode(renderer: ChatRenderer, texts: list[str]):
    config = RolloutConfig(max_turns=3, max_total_tokens=8192, max_new_tokens_per_turn=4096)
    engine = RolloutRunner(_scripted(renderer, texts), LocalEnvs(FilesEnv), renderer, config)
    (traj,) = asyncio.run(engine.run_episode({"task_id": "t", "prompt": "go"}, seed=0))
    return traj


def _tool_messages(traj) -> list[str]:
    return [m["content"] for m in traj.messages if m.get("role") == "tool"]


def test_deeply_nested_tool_call_is_an_error_observation_not_a_crash(renderer) -> None:
    nested = _call("[" * 1000 + "]" * 1000)
    traj = _episode(renderer, [nested, "done"])
    assert traj.status == Status.OK, traj.info
    (reply,) = _tool_messages(traj)
    assert "nested 1000 levels deep" in reply, reply
    assert traj.tool_error_count == 1


def test_a_lone_surrogate_path_is_an_error_and_the_next_prompt_renders(renderer) -> None:
    # Valid ASCII JSON whose path decodes to a lone surrogate: no file is written.
    call = _call('{"name": "write_file", "arguments": {"path": "\\udcff", "content": "x"}}')
    traj = _episode(renderer, [call, "done"])
    assert traj.status == Status.OK, traj.info
    (reply,) = _tool_messages(traj)
    assert reply.startswith("Error: the tool call's text"), reply  # refused at parse time
    assert "\\udcff" in reply and "is not valid Unicode text" in reply, reply
    assert traj.tool_error_count == 1
    reply.encode("utf-8")  # every message of the trajectory is valid text


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"name": "write_file", "arguments": {"path": "a", "content": "x",}}', "column 66"),
        ('{"name": "write_file", "arguments": {"path": "a" "content": "x"}}', "delimiter"),
        ("{'name': 'write_file', 'arguments': {}}", "double quotes"),
        ('{"name": "read_file", "name": "write_file", "arguments": {}}', 'duplicate key "name"'),
        ('{"name": "read_file", "arguments": {"path": "a", "path": "b"}}', 'duplicate key "path"'),
        ('{"arguments": {"path": "a"}}', 'no "name"'),
    ],
)
def test_malformed_calls_are_told_what_is_wrong(renderer, body, expected) -> None:
    message = renderer.parse(_ids(renderer, _call(body)), None, [])
    (reply,) = asyncio.run(ToolSet([write_file, read_file]).call_all(message["tool_calls"]))
    assert reply["content"].startswith("Error: ") and expected in reply["content"], reply
    assert "no tool name" not in reply["content"]


def test_an_unclosed_tool_call_is_told_so(renderer) -> None:
    text = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}'
    message = renderer.parse(_ids(renderer, text), None, [])
    (reply,) = asyncio.run(ToolSet([read_file]).call_all(message["tool_calls"]))
    assert "not closed with </tool_call>" in reply["content"], reply


def test_duplicate_keys_in_argument_strings_are_refused() -> None:
    toolset = ToolSet([read_file])
    call = {"function": {"name": "read_file", "arguments": '{"path": "a", "path": "b"}'}}
    reply = asyncio.run(toolset.call(call))
    assert 'duplicate key "path"' in reply["content"], reply
    assert toolset.error_counts["bad_json"] == 1


def test_tool_calls_per_message_are_capped(renderer) -> None:
    body = json.dumps({"name": "read_file", "arguments": {"path": "missing.txt"}})
    traj = _episode(renderer, ["".join(_call(body) for _ in range(20)), "done"])
    replies = _tool_messages(traj)
    assert len(replies) == 9, replies  # 8 run, one error answers the other 12
    assert "20 tool calls in one message; at most 8 run, the other 12 were skipped" in replies[-1]
    assert traj.tool_call_count == 9 and traj.tool_error_count == 9


def test_errors_a_tool_returns_count_as_tool_errors(renderer) -> None:
    call = _call('{"name": "write_file", "arguments": {"path": "/etc/x", "content": "x"}}')
    traj = _episode(renderer, [call, "done"])
    (reply,) = _tool_messages(traj)
    assert reply.startswith("Error:"), reply
    assert traj.tool_error_count == 1


def test_a_tool_call_inside_think_is_answered_with_an_error(renderer) -> None:
    call = _call('{"name": "write_file", "arguments": {"path": "thought.txt", "content": "x"}}')
    traj = _episode(renderer, [f"<think>\nfirst {call}\n</think>\nok", "done"])
    assert traj.status == Status.OK, traj.info
    (reply,) = _tool_messages(traj)
    assert reply == (
        "Error: tool calls inside the <think>...</think> block are not executed; "
        "write the <tool_call> after </think>"
    ), reply
    assert traj.tool_call_count == 1 and traj.tool_error_count == 1


def test_a_well_formed_call_after_think_runs_as_before(renderer) -> None:
    call = _call('{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}')
    message = renderer.parse(_ids(renderer, f"<think>\nplan\n</think>\n{call}"), None, [])
    assert message["tool_calls"] == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "write_file", "arguments": '{"path": "a.txt", "content": "x"}'},
        }
    ]
    traj = _episode(renderer, [f"<think>\nplan\n</think>\n{call}", "done"])
    assert _tool_messages(traj) == ["Wrote 1 bytes to a.txt"]
    assert traj.tool_call_count == 1 and traj.tool_error_count == 0

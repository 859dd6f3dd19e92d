"""A tiny Qwen3 causal LM and tokenizer, built deterministically and cached on disk.

This is how the CPU default and every test get a model: nothing is downloaded. The tokenizer is a
byte-level BPE trained on text the `corpus_envs` produce (digits split one per token, so
arithmetic stays learnable), carrying the Qwen3 chat special tokens so the `renderers` Qwen3
renderer serves it unchanged. The folder is a standard Hugging Face model folder (safetensors,
tokenizer, chat template) that transformers and vLLM load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from forge_agent.models.config import DEFAULT_CORPUS_ENVS, TinyModelConfig

QWEN3_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

# A compact Qwen3-compatible chat template (tools, tool calls, tool responses, thinking switch),
# so `tokenizer.apply_chat_template` and vLLM's chat endpoints give the renderer's token ids.
# transformers renders with trim_blocks (the newline right after a block tag is dropped), so no
# block tag is followed by a newline: such newlines are written as {{ '\n' }}. Thinking is off
# unless `enable_thinking=True` is passed, as the tiny model trains (empty think block).
QWEN3_CHAT_TEMPLATE = r"""{%- set ns = namespace(last_user=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>{% for tool in tools %}{{ '\n' }}{{ tool | tojson }}{% endfor %}{{ '\n' }}</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}{%- for message in messages %}{%- if message.role == 'user' %}<|im_start|>user
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.reasoning_content %}<think>
{{ message.reasoning_content.strip('\n') }}
</think>

{% elif not enable_thinking or loop.index0 > ns.last_user %}<think>

</think>

{% endif %}{{ message.content or '' }}{% for tc in message.tool_calls or [] %}{% set f = tc.function if tc.function else tc %}{% if loop.first and message.content or not loop.first %}{{ '\n' }}{% endif %}<tool_call>
{"name": "{{ f.name }}", "arguments": {{ f.arguments if f.arguments is string else f.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}{{ '\n' }}<tool_response>
{{ message.content }}
</tool_response>{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>
{% endif %}{% endif %}{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% if not enable_thinking %}<think>

</think>

{% endif %}{% endif %}"""

# The tool block of a Qwen3 system prompt, as the template above writes it (the corpus is
# rendered as text before the tokenizer exists; tests/test_chat_template.py holds the template,
# this text and the `renderers` Qwen3 renderer to the same tokens).
TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

_BUILTIN_CORPUS = (
    "You are a helpful assistant. Use the tools when they help. Answer with the final result.",
    "def solve(x):\n    return x\n\nimport math\nfor i in range(10):\n    print(i)\n",
    'if __name__ == "__main__":\n    assert add(1, 2) == 3\nclass Solution:\n    pass\n',
    'Error: unknown tool. Traceback (most recent call last):\n  File "<stdin>", line 1\n',
    "The answer is \\boxed{42}. stdout: exit code: 0 stderr: True False None",
)


def default_cache_dir() -> Path:
    """`$FORGE_AGENT_CACHE` or `~/.cache/forge-agent`."""
    root = os.environ.get("FORGE_AGENT_CACHE") or Path.home() / ".cache" / "forge-agent"
    return Path(root) / "models"


def env_corpus(env_ids: Sequence[str] = DEFAULT_CORPUS_ENVS) -> list[str]:
    """Tokenizer text: a few built-in lines, then each env's corpus rendered in the Qwen3
    chat format (system prompts, tool specs, prompts, tool calls, tool results, answers), from
    the env's `corpus()` hook or, without one, its reset messages (`forge_agent.env.demonstrations`)."""
    # imported here: the env package: +0.1 s at import, measured; only for the tiny model's
    # tokenizer corpus
    from forge_agent.env.corpus import corpus_of
    from forge_agent.env.resolved import ResolvedEnv

    texts: list[str] = list(_BUILTIN_CORPUS)
    for env_id in env_ids:  # names read from the model's recipe: resolved here, once each
        for item in corpus_of(ResolvedEnv.of(env_id)):
            texts.append(item if isinstance(item, str) else _render_text(*item))
    return texts


def _render_text(messages: list[dict], tools: list[dict]) -> str:
    """Qwen3 chat format as plain text (the tokenizer does not exist yet)."""
    parts = []
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
    if tools:
        specs = "".join("\n" + json.dumps(t) for t in tools)
        head = f"{system}\n\n" if system else ""
        parts.append(f"<|im_start|>system\n{head}{TOOLS_HEADER}{specs}{TOOLS_FOOTER}<|im_end|>\n")
    elif system:
        parts.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    for m in messages:
        if m["role"] in ("user", "assistant"):
            body = m.get("content") or ""
            for tc in m.get("tool_calls") or []:
                f = tc["function"]
                args = (
                    f["arguments"]
                    if isinstance(f["arguments"], str)
                    else json.dumps(f["arguments"])
                )
                body += f'<tool_call>\n{{"name": "{f["name"]}", "arguments": {args}}}\n</tool_call>'
            think = "<think>\n\n</think>\n\n" if m["role"] == "assistant" else ""
            parts.append(f"<|im_start|>{m['role']}\n{think}{body}<|im_end|>\n")
        elif m["role"] == "tool":
            parts.append(
                f"<|im_start|>user\n<tool_response>\n{m['content']}\n</tool_response><|im_end|>\n"
            )
    return "".join(parts)


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """Train a byte-level BPE with the Qwen3 special tokens; digits are split one per token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(QWEN3_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(QWEN3_SPECIAL_TOKENS[1:]),
        model_max_length=1 << 20,
    )
    fast.chat_template = QWEN3_CHAT_TEMPLATE
    return fast


def build_model(
    cfg: TinyModelConfig,
    vocab_size: int,
    eos_id: int | None = None,
    pad_id: int | None = None,
    attn_implementation: str | None = None,
):
    """A randomly initialised `Qwen3ForCausalLM` of the configured size, seeded (also how
    tests and benchmarks get a model of a given shape without a tokenizer)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype="float32",
        **({"attn_implementation": attn_implementation} if attn_implementation else {}),
    )
    torch.manual_seed(cfg.seed)
    model = Qwen3ForCausalLM(config)
    return model.to(torch.float32)


def ensure_tiny_model(
    cfg: TinyModelConfig | None = None, cache_dir: str | Path | None = None
) -> Path:
    """Return a Hugging Face folder holding the tiny model, building it on first use.

    The folder name is a hash of the config and the tokenizer corpus, so a change to either
    builds a new model; the build is written to a temporary folder and renamed into place, so
    concurrent callers never see half a model.
    """
    cfg = cfg or TinyModelConfig()
    texts = env_corpus(cfg.corpus_envs) + list(cfg.extra_corpus)
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = root / f"tiny-qwen3-{cfg.key(digest)}"
    if (path / "config.json").exists():
        refresh_chat_template(path)
        return path

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=root))
    try:
        tokenizer = train_tokenizer(texts, cfg.vocab_size)
        model = build_model(
            cfg,
            vocab_size=len(tokenizer),
            eos_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
            pad_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        )
        model.generation_config.eos_token_id = [
            tokenizer.convert_tokens_to_ids("<|im_end|>"),
            tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        ]
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "forge_agent_tiny.json").write_text(json.dumps(asdict(cfg), indent=2))
        try:
            tmp.rename(path)
        except OSError:  # another process won the race; its folder is equivalent
            if not (path / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def refresh_chat_template(folder: str | Path) -> bool:
    """Write ``QWEN3_CHAT_TEMPLATE`` into a tiny-model folder saved with an older one.

    The template is not part of the model's cache key (it changes no weight or token), so a
    cached folder is brought up to date in place; returns whether it was rewritten.
    """
    path = Path(folder) / "chat_template.jinja"
    if not path.exists() or path.read_text(encoding="utf-8") == QWEN3_CHAT_TEMPLATE:
        return False
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(QWEN3_CHAT_TEMPLATE, encoding="utf-8")
    os.replace(tmp, path)
    return True


def load_tokenizer(path: str | Path, **kwargs: Any):
    """Load the tokenizer of a model folder (tiny or hub); `kwargs` go to `from_pretrained`.

    The tiny model's folder (and a warm start saved from it) loads through transformers'
    `TokenizersBackend` itself, the class `AutoTokenizer` picks for it: importing
    `AutoTokenizer` imports torch and transformers' model configs, 0.26 GB of PSS (measured) in
    a driver that needs only the tokenizer. Any other folder goes through `AutoTokenizer`."""
    if _tiny_tokenizer(Path(path)):
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        return TokenizersBackend.from_pretrained(str(path), **kwargs)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), **kwargs)


def _tiny_tokenizer(folder: Path) -> bool:
    """Whether `folder` holds a tokenizer `AutoTokenizer` would load as `TokenizersBackend`
    by its own config: the tiny model's (`tokenizer_class` TokenizersBackend, no remote code,
    a qwen3 config, which transformers maps to no other class)."""
    try:
        tokenizer = json.loads((folder / "tokenizer_config.json").read_text())
        model = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return (
        tokenizer.get("tokenizer_class") == "TokenizersBackend"
        and "auto_map" not in tokenizer
        and model.get("model_type") == "qwen3"
        and "auto_map" not in model
    )

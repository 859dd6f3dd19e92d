"""Chat templates the project ships, for GGUF files that carry none (`tokenizer.chat_template`).

A GGUF file of a base model often has no template (Gemma 3 270M's has none), and then neither
`renderers`' default renderer nor `transformers`' `apply_chat_template` can write a
conversation. `convert_gguf` writes the file's own template into the converted folder when it
has one; otherwise the template of the file's chat format, told by its turn tokens (a llama
GGUF may speak ChatML, as SmolLM2 does, or Llama 3), with the file's architecture as the
tie-breaker, and says which in the setup line.

The templates write plain conversations the way `forge_agent/rollout/text_tools.py` renders
them (tools are the renderer's: these templates know none), so a folder used outside the
project (vLLM's server, TRL) speaks the same turns the policy was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["TEMPLATES", "ChatTemplate", "shipped_template"]


@dataclass(frozen=True)
class ChatTemplate:
    """A chat format's Jinja template and the tokens a vocabulary needs to speak it."""

    family: str
    tokens: tuple[str, ...]
    jinja: str


_CHATML = (
    "{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant\n{% endif -%}"
)

_GEMMA = (
    "{{ bos_token }}{%- set ns = namespace(system='') -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set ns.system = messages[0]['content'] ~ '\n\n' -%}{%- endif -%}"
    "{%- for m in messages if m['role'] != 'system' -%}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{{ ns.system if loop.first else '' }}{{ m['content'] }}<end_of_turn>\n"
    "{% endfor -%}{%- if add_generation_prompt -%}<start_of_turn>model\n{% endif -%}"
)

_PHI3 = (
    "{%- for m in messages -%}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n"
    "{% endfor -%}{%- if add_generation_prompt -%}<|assistant|>\n{% endif -%}"
)

_LLAMA3 = (
    "{{ bos_token }}{%- for m in messages -%}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{%- endfor -%}{%- if add_generation_prompt -%}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{%- endif -%}"
)

_MISTRAL = (
    "{{ bos_token }}{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}{{ m['content'] }}{{ eos_token }}"
    "{%- else -%}[INST] {{ m['content'] }} [/INST]{%- endif -%}{%- endfor -%}"
)

TEMPLATES = {
    t.family: t
    for t in (
        ChatTemplate("chatml", ("<|im_start|>", "<|im_end|>"), _CHATML),
        ChatTemplate("gemma", ("<start_of_turn>", "<end_of_turn>"), _GEMMA),
        ChatTemplate("phi3", ("<|user|>", "<|assistant|>", "<|end|>"), _PHI3),
        ChatTemplate("llama3", ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), _LLAMA3),
        ChatTemplate("mistral", ("[INST]", "[/INST]"), _MISTRAL),
    )
}
"""The shipped templates, by chat family, in the order a vocabulary is matched against them."""


def shipped_template(
    tokenizer: PreTrainedTokenizerBase, architecture: str | None = None
) -> ChatTemplate | None:
    """The shipped template for `tokenizer`: the first family whose tokens its vocabulary has
    (each as one token); else Mistral's for a `mistral` architecture (an old Mistral
    vocabulary writes `[INST]` as plain text); None when neither."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    for template in TEMPLATES.values():
        if all(token in vocab for token in template.tokens):
            return template
    return TEMPLATES["mistral"] if architecture == "mistral" else None

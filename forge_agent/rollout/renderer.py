"""Chat rendering for rollouts through the `renderers` package: token-in/token-out.

The first prompt is a full render; every later prompt is built append-only with
`bridge_to_next_turn`, so tokens the policy sampled are never re-tokenized. When the bridge is
impossible the caller falls back to a full render and starts a new training segment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from forge_agent.types import Message, ToolSpec


@dataclass
class RendererConfig:
    """`kind`: "qwen3" (the tiny model and Qwen3 hub models), "default" (the model's own chat
    template through `renderers`' default renderer), or "auto" (qwen3 for Qwen3 models)."""

    kind: str = "auto"
    enable_thinking: bool = False


class ChatRenderer:
    """Messages to token ids and back, for one tokenizer."""

    def __init__(self, tokenizer: Any, config: RendererConfig | None = None) -> None:
        import renderers

        self.config = config or RendererConfig()
        self.tokenizer = tokenizer
        kind = self.config.kind
        if kind == "auto":
            kind = "qwen3" if _is_qwen3(tokenizer) else "default"
        if kind == "qwen3":
            rcfg: Any = renderers.Qwen3RendererConfig(enable_thinking=self.config.enable_thinking)
        elif kind == "default":
            rcfg = renderers.DefaultRendererConfig()
        else:
            raise ValueError(f"renderer kind must be 'auto', 'qwen3' or 'default', got {kind!r}")
        self.kind = kind
        self._renderer = renderers.create_renderer(tokenizer, rcfg)
        self.stop_token_ids = list(self._renderer.get_stop_token_ids())

    def render_prompt(self, messages: list[Message], tools: list[ToolSpec] | None) -> list[int]:
        """Full render of `messages` ending in the assistant generation prompt."""
        return list(
            self._renderer.render_ids(messages, tools=tools or None, add_generation_prompt=True)
        )

    def render_full(self, messages: list[Message], tools: list[ToolSpec] | None) -> list[int]:
        """Full render of a finished conversation (no generation prompt)."""
        return list(self._renderer.render_ids(messages, tools=tools or None))

    def bridge(
        self,
        prompt_ids: list[int],
        completion_ids: list[int],
        new_messages: list[Message],
        tools: list[ToolSpec] | None,
    ) -> list[int] | None:
        """The next prompt as `prompt_ids + completion_ids + new tokens`, or None when the
        renderer cannot extend the sampled history append-only."""
        out = self._renderer.bridge_to_next_turn(
            list(prompt_ids), list(completion_ids), new_messages, tools=tools or None
        )
        if out is None:
            return None
        ids = list(out.token_ids)
        prefix = len(prompt_ids) + len(completion_ids)
        if ids[:prefix] != list(prompt_ids) + list(completion_ids):
            return None  # the renderer had to trim or close the turn: not append-only
        return ids

    def parse(
        self,
        completion_ids: list[int],
        tools: list[ToolSpec] | None,
        prompt_ids: list[int],
        call_prefix: str = "call",
    ) -> Message:
        """The assistant message of a completion. Malformed tool calls are kept (arguments as
        the raw text) so the env's ToolSet answers them with an error the model can read."""
        from renderers import ToolCallParseStatus

        parsed = self._renderer.parse_response(
            list(completion_ids), tools=tools or None, prompt_ids=list(prompt_ids)
        )
        message: Message = {"role": "assistant", "content": parsed.content or ""}
        if parsed.reasoning_content:
            message["reasoning_content"] = parsed.reasoning_content
        calls = []
        for i, tc in enumerate(parsed.tool_calls):
            if tc.status == ToolCallParseStatus.OK:
                args = tc.arguments
                arguments = args if isinstance(args, str) else json.dumps(args)
            else:
                arguments = tc.raw
            calls.append(
                {
                    "id": f"{call_prefix}_{i}",
                    "type": "function",
                    "function": {"name": tc.name or "", "arguments": arguments},
                }
            )
        if calls:
            message["tool_calls"] = calls
        return message

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def truncate_text(self, text: str, max_tokens: int) -> str:
        """`text` cut to `max_tokens` tokens, with a visible marker when cut."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) <= max_tokens:
            return text
        kept = self.tokenizer.decode(ids[:max_tokens])
        return f"{kept}\n...[truncated {len(ids) - max_tokens} tokens]"


def _is_qwen3(tokenizer: Any) -> bool:
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    needed = ("<|im_start|>", "<|im_end|>", "<tool_call>", "<tool_response>", "<think>")
    return all(tok in vocab for tok in needed)

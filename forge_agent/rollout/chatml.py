"""ChatML with tools, for models whose tokenizer has ChatML's two special tokens and nothing else.

Many small instruction models (SmolLM2, and most models converted from GGUF) speak ChatML
(`<|im_start|>role\\n...<|im_end|>`) but their chat template knows no tools and their
vocabulary has no `<tool_call>` token. `renderers`' default renderer then cannot parse a call
and never bridges a turn (every turn would re-render the history as a new segment). This
renderer writes the Hermes tool format that Qwen's templates use, in plain text:

    <|im_start|>system
    {system prompt}

    You may call a tool: write <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
    Tools: {"name": "calculator", ...}<|im_end|>
    <|im_start|>user
    What is 37 * 12?<|im_end|>
    <|im_start|>assistant
    <tool_call>{"name": "calculator", "arguments": {"expression": "37 * 12"}}</tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    444
    </tool_response><|im_end|>
    <|im_start|>assistant
    444<|im_end|>

The tags are ordinary text (several tokens each), parsed from the decoded completion. Text
between special tokens is encoded piece by piece, the same way in a full render and in a
bridge, so a bridged prompt is the sampled history plus exactly the tokens a full render
would add after it (append-only; nothing sampled is re-tokenized).

It implements the part of `renderers`' renderer protocol that `ChatRenderer` uses
(`render_ids`, `bridge_to_next_turn`, `parse_response`, `get_stop_token_ids`), and returns
`renderers`' own result types.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from renderers import ParsedResponse, ParsedToolCall, ToolCallParseStatus

from forge_agent.types import Message, ToolSpec

__all__ = ["ChatMLToolRenderer", "is_chatml"]

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

TOOLS_HEADER = (
    "You may call a tool: write "
    '<tool_call>{"name": <tool name>, "arguments": <JSON object>}</tool_call> '
    "and wait for its result.\nTools:"
)
"""What the system message says about calling tools, before one JSON line per tool."""

_CALL_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)(" + re.escape(CALL_CLOSE) + r"|$)", re.S)


def is_chatml(tokenizer: Any) -> bool:
    """Whether `tokenizer` has ChatML's turn tokens as single special tokens."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return IM_START in vocab and IM_END in vocab


class _Rendered:
    """What `bridge_to_next_turn` returns (the attribute `ChatRenderer.bridge` reads)."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids


class ChatMLToolRenderer:
    """Messages <-> token ids in ChatML with Hermes-style tool calls written as text."""

    def __init__(self, tokenizer: Any) -> None:
        if not is_chatml(tokenizer):
            raise ValueError(
                f"renderer kind 'chatml' needs a tokenizer with {IM_START} and {IM_END} tokens; "
                f"{type(tokenizer).__name__} has neither as one token"
            )
        self._tokenizer = tokenizer
        self._start = tokenizer.convert_tokens_to_ids(IM_START)
        self._end = tokenizer.convert_tokens_to_ids(IM_END)

    # -- rendering -----------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False)) if text else []

    def _turn(self, role: str, body: str) -> list[int]:
        """`<|im_start|>role\\nbody<|im_end|>\\n` (the body encoded on its own)."""
        return [self._start, *self._encode(f"{role}\n{body}"), self._end, *self._encode("\n")]

    def _system_text(self, messages: list[Message], tools: list[ToolSpec] | None) -> str | None:
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
        if not tools:
            return system
        lines = "\n".join(json.dumps(_function_of(t), ensure_ascii=False) for t in tools)
        head = f"{system}\n\n" if system else ""
        return f"{head}{TOOLS_HEADER}\n{lines}"

    def _message(self, message: Message) -> list[int]:
        role = message["role"]
        if role == "assistant":
            return self._turn("assistant", assistant_text(message))
        if role == "tool":
            body = f"<tool_response>\n{_text(message.get('content'))}\n</tool_response>"
            return self._turn("user", body)
        return self._turn(role, _text(message.get("content")))

    def render_ids(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        add_generation_prompt: bool = False,
    ) -> list[int]:
        ids: list[int] = []
        system = self._system_text(messages, tools)
        if system is not None:
            ids += self._turn("system", system)
        for message in messages:
            if message["role"] != "system":
                ids += self._message(message)
        if add_generation_prompt:
            ids += [self._start, *self._encode("assistant\n")]
        return ids

    def bridge_to_next_turn(
        self,
        previous_prompt_ids: list[int],
        previous_completion_ids: list[int],
        new_messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
    ) -> _Rendered | None:
        """The sampled history, its turn closed (`<|im_end|>` added when the completion was
        cut before it), then `new_messages` and the next generation prompt. None for a system
        message (it belongs at the top, so the history cannot be extended append-only)."""
        if any(m["role"] in ("system", "assistant") for m in new_messages):
            return None
        ids = [*previous_prompt_ids, *previous_completion_ids]
        if not previous_completion_ids or previous_completion_ids[-1] != self._end:
            ids.append(self._end)
        ids += self._encode("\n")
        for message in new_messages:
            ids += self._message(message)
        ids += [self._start, *self._encode("assistant\n")]
        return _Rendered(ids)

    def get_stop_token_ids(self) -> list[int]:
        return [self._end]

    # -- parsing -------------------------------------------------------------------------

    def parse_response(
        self,
        token_ids: list[int],
        *,
        tools: list[ToolSpec] | None = None,  # unused: names are checked by the ToolSet
        prompt_ids: list[int] | None = None,  # unused: ChatML has no prefilled reasoning
    ) -> ParsedResponse:
        ids = list(token_ids)
        while ids and ids[-1] == self._end:
            ids.pop()
        text = self._tokenizer.decode(ids, skip_special_tokens=False)
        first = text.find(CALL_OPEN)
        if first < 0:
            return ParsedResponse(content=text.strip(), tool_calls=[])
        calls = [_parse_call(body, closed) for body, closed in _CALL_BLOCK.findall(text[first:])]
        return ParsedResponse(content=text[:first].strip(), tool_calls=calls)


def assistant_text(message: Message) -> str:
    """An assistant message as its text: the content, then each call as a tagged JSON line."""
    parts = [_text(message.get("content"))] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(ValueError):  # else written as the policy wrote it
                args = json.loads(args)
        body = json.dumps({"name": fn.get("name", ""), "arguments": args}, ensure_ascii=False)
        parts.append(f"{CALL_OPEN}{body}{CALL_CLOSE}")
    return "\n".join(parts)


def _parse_call(body: str, closed: str) -> ParsedToolCall:
    raw = body.strip()
    if not closed:
        return ParsedToolCall(raw=raw, status=ToolCallParseStatus.UNCLOSED_BLOCK)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return ParsedToolCall(raw=raw, status=ToolCallParseStatus.INVALID_JSON)
    if not isinstance(data, dict):
        return ParsedToolCall(raw=raw, status=ToolCallParseStatus.MALFORMED_STRUCTURE)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return ParsedToolCall(raw=raw, status=ToolCallParseStatus.MISSING_NAME)
    arguments = data.get("arguments", {})
    return ParsedToolCall(raw=raw, name=name, arguments=arguments, status=ToolCallParseStatus.OK)


def _function_of(tool: Any) -> dict[str, Any]:
    """The `{"name", "description", "parameters"}` of an OpenAI-style tool spec."""
    spec = dict(tool) if isinstance(tool, dict) else dict(vars(tool))
    return spec.get("function", spec)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)

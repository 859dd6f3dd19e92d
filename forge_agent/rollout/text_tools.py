"""Tools written as text, for chat families whose template knows no tools: ChatML, Gemma, Phi-3.

Many small models speak a chat format whose template has no tools and whose vocabulary has no
`<tool_call>` token: SmolLM2 and most GGUF exports (ChatML), Gemma 3 (`<start_of_turn>`, no
system or tool role), Phi-3 (`<|user|>`, `<|end|>`). `renderers`' default renderer then cannot
parse a call and never bridges a turn. This renderer writes each family's own turns and the
Hermes tool format that Qwen's templates use, in plain text. In Gemma's format:

    <bos><start_of_turn>user
    {system prompt}

    You may call a tool: write <tool_call>{"name": ..., "arguments": {...}}</tool_call> ...
    Tools:
    {"name": "calculator", ...}

    What is 6 * 7?<end_of_turn>
    <start_of_turn>model
    <tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call><end_of_turn>
    <start_of_turn>user
    <tool_response>
    42
    </tool_response><end_of_turn>
    <start_of_turn>model
    42<end_of_turn>

- A family without a system turn (Gemma) opens its first user turn with the system text; one
  whose turns must alternate (Gemma) puts consecutive tool replies and user messages in one
  user turn. Tool replies go in a user turn, wrapped in `<tool_response>`, in every family.
- The tags are ordinary text, parsed from the decoded completion. Text between special tokens
  is encoded piece by piece, the same way in a full render and in a bridge, so a bridged prompt
  is the sampled history plus exactly the tokens a full render would add after it
  (append-only; nothing sampled is re-tokenized).
- The stops are the family's end-of-turn token and the tokenizer's end-of-sequence token
  (a base model, Gemma 3 270M, ends with `<eos>` as often as with `<end_of_turn>`).

It implements the part of `renderers`' renderer protocol that `ChatRenderer` uses
(`render_ids`, `bridge_to_next_turn`, `parse_response`, `get_stop_token_ids`), and returns
`renderers`' own result types.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from renderers import ParsedResponse, ParsedToolCall, ToolCallParseStatus

from forge_agent.types import Message, ToolSpec

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "FAMILIES",
    "TOOLS_HEADER",
    "ChatFamily",
    "TextToolRenderer",
    "assistant_text",
    "family_of",
]

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

TOOLS_HEADER = (
    "You may call a tool: write "
    '<tool_call>{"name": <tool name>, "arguments": <JSON object>}</tool_call> '
    "and wait for its result.\nTools:"
)
"""What the system text says about calling tools, before one JSON line per tool."""

_CALL_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)(" + re.escape(CALL_CLOSE) + r"|$)", re.S)


@dataclass(frozen=True)
class ChatFamily:
    """One chat format: how a turn opens and closes, and what the format lacks.

    A turn is `open(role)` (a special token), then `prefix(role) + body` encoded as one text,
    then `end` and a newline. `start` names the open token (with `{role}` for a family whose
    role is the token, Phi-3's `<|user|>`); `roles` renames roles (Gemma's assistant is
    `model`); `system` False: the system text opens the first user turn; `alternate`: the
    family's turns alternate user/model, so consecutive non-assistant messages share a turn.
    """

    name: str
    start: str
    end: str
    prefix: str = "{role}\n"
    bos: str | None = None
    roles: tuple[tuple[str, str], ...] = ()
    system: bool = True
    alternate: bool = False

    def role(self, role: str) -> str:
        return dict(self.roles).get(role, role)

    def markers(self) -> tuple[str, ...]:
        """The tokens a vocabulary must have, each as one token, to speak this family."""
        if "{role}" in self.start:
            roles = ("user", "assistant") + (("system",) if self.system else ())
            return (*(self.start.format(role=self.role(r)) for r in roles), self.end)
        return (self.start, self.end) + ((self.bos,) if self.bos else ())


FAMILIES = {
    "chatml": ChatFamily("chatml", start="<|im_start|>", end="<|im_end|>"),
    "gemma": ChatFamily(
        "gemma",
        start="<start_of_turn>",
        end="<end_of_turn>",
        bos="<bos>",
        roles=(("assistant", "model"), ("tool", "user")),
        system=False,
        alternate=True,
    ),
    "phi3": ChatFamily("phi3", start="<|{role}|>", end="<|end|>", prefix="\n"),
}
"""The chat families this renderer writes, by `renderer.kind`."""


def family_of(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The first family in `FAMILIES` whose turn tokens `tokenizer` has as single tokens."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    for name, family in FAMILIES.items():
        if all(token in vocab for token in family.markers()):
            return name
    return None


class _Rendered:
    """What `bridge_to_next_turn` returns (the attribute `ChatRenderer.bridge` reads)."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids


class TextToolRenderer:
    """Messages <-> token ids in one `ChatFamily`, with Hermes-style tool calls as text."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, family: str | ChatFamily = "chatml"
    ) -> None:
        self.family = FAMILIES[family] if isinstance(family, str) else family
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        missing = [t for t in self.family.markers() if t not in vocab]
        if missing:
            raise ValueError(
                f"renderer kind {self.family.name!r} needs a tokenizer with "
                f"{', '.join(self.family.markers())} as single tokens; "
                f"{type(tokenizer).__name__} lacks {', '.join(missing)}"
            )
        self._tokenizer = tokenizer
        self._end = vocab[self.family.end]
        self._bos = [vocab[self.family.bos]] if self.family.bos else []
        self._vocab = vocab
        eos = getattr(tokenizer, "eos_token_id", None)
        self._stops = [self._end] + ([eos] if isinstance(eos, int) and eos != self._end else [])

    # -- rendering -----------------------------------------------------------------------

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False)) if text else []

    def _open(self, role: str) -> list[int]:
        """The opening special token of a `role` turn."""
        return [self._vocab[self.family.start.format(role=self.family.role(role))]]

    def _turn(self, role: str, body: str) -> list[int]:
        """`open(role)`, `prefix + body` encoded as one text, the end token and a newline."""
        head = self.family.prefix.format(role=self.family.role(role))
        return [*self._open(role), *self._encode(f"{head}{body}"), self._end, *self._encode("\n")]

    def _generation_prompt(self) -> list[int]:
        head = self.family.prefix.format(role=self.family.role("assistant"))
        return [*self._open("assistant"), *self._encode(head)]

    def _system_text(self, messages: list[Message], tools: list[ToolSpec] | None) -> str | None:
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
        if not tools:
            return system
        lines = "\n".join(json.dumps(_function_of(t), ensure_ascii=False) for t in tools)
        head = f"{system}\n\n" if system else ""
        return f"{head}{TOOLS_HEADER}\n{lines}"

    def _turns(self, messages: list[Message]) -> list[tuple[str, str]]:
        """(role, body) of each turn of the non-system `messages`: in an alternating family,
        consecutive non-assistant messages are one user turn."""
        turns: list[tuple[str, str]] = []
        for message in messages:
            role = message["role"]
            if role == "assistant":
                turns.append(("assistant", assistant_text(message)))
                continue
            if role == "tool":
                body = f"<tool_response>\n{_text(message.get('content'))}\n</tool_response>"
                role = "user"
            else:
                body = _text(message.get("content"))
            if self.family.alternate:
                role = "user"
                if turns and turns[-1][0] == "user":
                    turns[-1] = ("user", f"{turns[-1][1]}\n\n{body}")
                    continue
            turns.append((role, body))
        return turns

    def render_ids(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        add_generation_prompt: bool = False,
    ) -> list[int]:
        ids: list[int] = list(self._bos)
        system = self._system_text(messages, tools)
        turns = self._turns([m for m in messages if m["role"] != "system"])
        if system is not None and self.family.system:
            ids += self._turn("system", system)
        elif system is not None:  # no system turn: the system text opens the first user turn
            if turns and turns[0][0] == "user":
                turns[0] = ("user", f"{system}\n\n{turns[0][1]}")
            else:
                turns.insert(0, ("user", system))
        for role, body in turns:
            ids += self._turn(role, body)
        if add_generation_prompt:
            ids += self._generation_prompt()
        return ids

    def bridge_to_next_turn(
        self,
        previous_prompt_ids: list[int],
        previous_completion_ids: list[int],
        new_messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
    ) -> _Rendered | None:
        """The sampled history, its turn closed (the end token added when the completion was
        cut before it or stopped on end-of-sequence), then `new_messages` and the next
        generation prompt. None for a system or assistant message (a system
        message belongs at the top, so the history cannot be extended append-only)."""
        if any(m["role"] in ("system", "assistant") for m in new_messages):
            return None
        ids = [*previous_prompt_ids, *previous_completion_ids]
        if not previous_completion_ids or previous_completion_ids[-1] != self._end:
            ids.append(self._end)
        ids += self._encode("\n")
        for role, body in self._turns(new_messages):
            ids += self._turn(role, body)
        ids += self._generation_prompt()
        return _Rendered(ids)

    def get_stop_token_ids(self) -> list[int]:
        return list(self._stops)

    # -- parsing -------------------------------------------------------------------------

    def parse_response(
        self,
        token_ids: list[int],
        *,
        tools: list[ToolSpec] | None = None,  # unused: names are checked by the ToolSet
        prompt_ids: list[int] | None = None,  # unused: these families prefill no reasoning
    ) -> ParsedResponse:
        ids = list(token_ids)
        while ids and ids[-1] in self._stops:
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

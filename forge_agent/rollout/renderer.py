"""Chat rendering for rollouts through the `renderers` package: token-in/token-out.

The first prompt is a full render; every later prompt is built append-only with
`bridge_to_next_turn`, so tokens the policy sampled are never re-tokenized. When the bridge is
impossible the caller falls back to a full render and starts a new training segment.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from forge_agent.errors import SetupError
from forge_agent.rollout.config import RendererConfig
from forge_agent.rollout.text_tools import FAMILIES, TextToolRenderer, family_of
from forge_agent.toolkit.schema import loads_strict
from forge_agent.types import Message, ToolSpec

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

KINDS = ("auto", "qwen3", *FAMILIES, "llama3", "default")
"""The values of `renderer.kind`."""

LLAMA3_TOKENS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
"""The turn tokens of Llama 3's format (`renderers`' `Llama3Renderer`)."""


class RendererError(SetupError, ValueError):
    """A tokenizer the project cannot render or parse a conversation for: the message names what
    is missing and the `renderer.kind` that fixes it."""


def auto_kind(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The renderer kind `auto` picks for `tokenizer`: qwen3 (Qwen's tool tokens), a text-tool
    family (`text_tools.FAMILIES`: ChatML, Gemma, Phi-3), llama3, default (the tokenizer's own
    chat template); None when it has neither turn tokens the project knows nor a template."""
    if _is_qwen3(tokenizer):
        return "qwen3"
    family = family_of(tokenizer)
    if family is not None:
        return family
    if _has_tokens(tokenizer, LLAMA3_TOKENS):
        return "llama3"
    return "default" if getattr(tokenizer, "chat_template", None) else None


class ChatRenderer:
    """Messages to token ids and back, for one tokenizer."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, config: RendererConfig | None = None
    ) -> None:
        import renderers

        self.config = config or RendererConfig()
        self.tokenizer = tokenizer
        kind = self.config.kind
        if kind not in KINDS:
            raise RendererError(f"renderer.kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if kind == "auto":
            kind = auto_kind(tokenizer)
            if kind is None:
                raise RendererError(
                    "its tokenizer has no chat template (tokenizer.chat_template) and none of "
                    "the turn tokens the project writes tools for (ChatML <|im_start|>, Gemma "
                    "<start_of_turn>, Phi-3 <|user|>, Llama 3 <|start_header_id|>): set "
                    f"renderer.kind to one of {', '.join(KINDS[1:-1])} if its format is one of "
                    "them, or give the model a chat template (a chat_template.jinja in its folder)"
                )
        try:
            if kind == "qwen3":
                rcfg: Any = renderers.Qwen3RendererConfig(
                    enable_thinking=self.config.enable_thinking
                )
                self._renderer = renderers.create_renderer(tokenizer, rcfg)
            elif kind in FAMILIES:
                self._renderer = TextToolRenderer(tokenizer, kind)
            elif kind == "llama3":
                self._renderer = renderers.create_renderer(
                    tokenizer, renderers.Llama3RendererConfig()
                )
            else:
                if not getattr(tokenizer, "chat_template", None):
                    raise ValueError(
                        "renderer kind 'default' renders with the tokenizer's own chat "
                        "template, and it has none (tokenizer.chat_template)"
                    )
                self._renderer = renderers.create_renderer(
                    tokenizer, renderers.DefaultRendererConfig()
                )
        except (ValueError, KeyError, AttributeError) as exc:
            raise RendererError(f"renderer.kind={kind!r}: {exc}") from None
        self.kind = kind
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
        """The assistant message of a completion; never raises.

        A malformed tool call is kept with its raw text as arguments and a ``parse_error``
        saying precisely what is wrong (invalid JSON at line/column N, an unclosed
        ``<tool_call>``, a duplicate key, nesting too deep, no name), so the env's ToolSet
        answers it with that error for the model to read. A ``<tool_call>`` written inside
        the ``<think>`` block is not executed; it becomes such a failed call
        (`THINK_CALL_ERROR`), so the model is told instead of the call vanishing.

        What comes back is data no later stage can choke on (`_checked_call`): a call's name
        is a string naming an offered tool, its arguments JSON text of at most
        `MAX_ARGUMENT_CHARS` and `JSON_MAX_DEPTH` levels, and no text holds a lone surrogate
        (content is repaired with U+FFFD; a call holding one fails); anything else is a
        failed call with a ``parse_error``.
        """
        from renderers import ToolCallParseStatus

        try:
            parsed = self._renderer.parse_response(
                list(completion_ids), tools=tools or None, prompt_ids=list(prompt_ids)
            )
        except Exception as exc:  # RecursionError on deep nesting, or any parser bug
            return self._unparsed(completion_ids, exc, call_prefix)
        message: Message = {"role": "assistant", "content": clean_text(parsed.content or "")}
        if parsed.reasoning_content:
            message["reasoning_content"] = clean_text(parsed.reasoning_content)
        calls = []
        for i, tc in enumerate(parsed.tool_calls):
            error = None
            if tc.status == ToolCallParseStatus.OK:
                args = tc.arguments
                arguments = args if isinstance(args, str) else json.dumps(args)
                error = _strict_problem(tc.raw)
            else:
                arguments = tc.raw
                error = _parse_problem(tc.raw, str(tc.status))
            call: dict[str, Any] = {
                "id": f"{call_prefix}_{i}",
                "type": "function",
                "function": {"name": tc.name or "", "arguments": arguments},
            }
            calls.append(_checked_call(call, error, tools))
        for raw in _calls_in(parsed.reasoning_content or ""):
            name = _call_name(raw)
            calls.append(
                {
                    "id": f"{call_prefix}_{len(calls)}",
                    "type": "function",
                    "function": {"name": name, "arguments": clean_text(_body(raw)[:2000])},
                    "parse_error": THINK_CALL_ERROR,
                }
            )
        if calls:
            message["tool_calls"] = calls
        return message

    def _unparsed(self, completion_ids: list[int], exc: Exception, call_prefix: str) -> Message:
        """The message of a completion the parser could not handle: its text as content, and
        one failed tool call (with the reason) when it tried to call a tool."""
        try:
            text = clean_text(
                self.tokenizer.decode(list(completion_ids), skip_special_tokens=False)
            )
        except Exception:
            text = ""
        message: Message = {"role": "assistant", "content": text}
        if "<tool_call>" in text:
            body = text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]
            reason = _strict_problem(body) or f"it could not be parsed ({type(exc).__name__})"
            message["tool_calls"] = [
                {
                    "id": f"{call_prefix}_0",
                    "type": "function",
                    "function": {"name": "", "arguments": body[:2000]},
                    "parse_error": reason,
                }
            ]
        return message

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def truncate_text(self, text: str, max_tokens: int) -> str:
        """`text` cut to `max_tokens` tokens, with a visible marker when cut (lone surrogates,
        which no tokenizer accepts, are replaced first: see `clean_text`)."""
        text = clean_text(text)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) <= max_tokens:
            return text
        kept = self.tokenizer.decode(ids[:max_tokens])
        return f"{kept}\n...[truncated {len(ids) - max_tokens} tokens]"


def clean_text(text: str) -> str:
    """`text` with lone surrogates (e.g. from a file name the sandbox could not decode)
    replaced by U+FFFD, so it can be encoded as UTF-8 and tokenized."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


_SURROGATE = re.compile("[\ud800-\udfff]")
_TAGS = ("<tool_call>", "</tool_call>")
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)

THINK_CALL_ERROR = (
    "tool calls inside the <think>...</think> block are not executed; "
    "write the <tool_call> after </think>"
)
"""What the model is told about a tool call it wrote while thinking."""


MAX_ARGUMENT_CHARS = 100_000
"""The longest arguments text a parsed call keeps (the ToolSet's `max_argument_chars`)."""


def _checked_call(call: dict[str, Any], error: str | None, tools: list[ToolSpec] | None) -> dict:
    """`call` as data every later stage can handle: a failed call (``parse_error``; a name
    that is not a string blanked, lone surrogates replaced, arguments past the bound cut)
    when its name is not a string naming an offered tool, its arguments are too large, or any
    of its text holds a lone surrogate."""
    function = call["function"]
    name, arguments = function["name"], function["arguments"]
    offered = [spec.get("function", {}).get("name") for spec in tools or []]
    if error is None and not isinstance(name, str):
        kind = type(name).__name__
        error = f'the tool call\'s "name" must be a string naming a tool, got {kind} {name!r:.50}'
    elif error is None and offered and name not in offered:
        error = f"unknown tool {name[:100]!r}; available: {', '.join(map(str, offered))}"
    if error is None and len(arguments) > MAX_ARGUMENT_CHARS:
        error = f"the arguments are {len(arguments)} characters; at most {MAX_ARGUMENT_CHARS}"
    text = f"{name}\n{arguments}" if isinstance(name, str) else arguments
    lone = _SURROGATE.search(text) or _SURROGATE.search(_unescaped(arguments))
    if error is None and lone:
        near = lone.string[max(0, lone.start() - 10) : lone.end() + 10]
        error = f"the tool call's text {near!r} is not valid Unicode text (a lone surrogate)"
    if error is None:
        return call
    if len(arguments) > MAX_ARGUMENT_CHARS:
        arguments = arguments[:2000]
    plain_name = clean_text(name) if isinstance(name, str) else ""
    function = {"name": plain_name, "arguments": clean_text(str(arguments))}
    return {**call, "function": function, "parse_error": error}


def _unescaped(arguments: str) -> str:
    """The strings inside JSON arguments, decoded (``"\\ud800"`` becomes a surrogate)."""
    if "\\u" not in arguments:
        return ""
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False)
    except (ValueError, RecursionError):
        return ""


def _calls_in(reasoning: str) -> list[str]:
    """The ``<tool_call>`` blocks (closed or not) of a reasoning text, as written."""
    return [f"<tool_call>{body}</tool_call>" for body in _CALL_BLOCK.findall(reasoning)]


def _call_name(raw: str) -> str:
    """The tool name of a call's JSON body, or "" when it has none readable."""
    try:
        data = loads_strict(_body(raw), "the tool call")
    except ValueError:
        return ""
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) else ""


def _body(raw: str) -> str:
    text = raw.strip()
    if text.startswith(_TAGS[0]):
        text = text[len(_TAGS[0]) :]
    if text.endswith(_TAGS[1]):
        text = text[: -len(_TAGS[1])]
    return text.strip()


def _strict_problem(raw: str) -> str | None:
    """What a strict decoder finds wrong with a call's JSON body (duplicate keys, nesting,
    syntax), or None."""
    try:
        loads_strict(_body(raw), "the tool call")
    except ValueError as exc:
        return str(exc)
    return None


def _parse_problem(raw: str, status: str) -> str:
    """A precise reason for a call the renderer could not parse."""
    if status == "unclosed_block" or (_TAGS[0] in raw and _TAGS[1] not in raw):
        return "the <tool_call> block is not closed with </tool_call>"
    strict = _strict_problem(raw)
    if strict is not None:
        return strict
    if status == "missing_name":
        return 'the tool call has no "name"; write {"name": "<tool>", "arguments": {...}}'
    if status == "unknown_tool":
        return "the tool call names an unknown tool"
    return 'the tool call must be one JSON object {"name": "<tool>", "arguments": {...}}'


def _has_tokens(tokenizer: Any, tokens: tuple[str, ...]) -> bool:
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return all(tok in vocab for tok in tokens)


def _is_qwen3(tokenizer: Any) -> bool:
    needed = ("<|im_start|>", "<|im_end|>", "<tool_call>", "<tool_response>", "<think>")
    return _has_tokens(tokenizer, needed)

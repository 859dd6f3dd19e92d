"""The OpenAI Chat Completions request the endpoint accepts, checked by pydantic.

Fields the endpoint does not use (`user`, `metadata`, `parallel_tool_calls`, ...) are accepted
and ignored, as OpenAI-compatible servers do; a known field of the wrong type or out of range
is a 400 that names the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_N = 16


class TextPart(BaseModel):
    """One part of a message's content; only text parts are supported."""

    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str | dict[str, Any] = ""


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolSpecModel(BaseModel):
    type: Literal["function"]
    function: FunctionSpec


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """`POST /v1/chat/completions` body (the subset of OpenAI's that a policy can honour)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpecModel] | None = None
    tool_choice: Literal["auto", "none"] | dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=0)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None

    @field_validator("tool_choice")
    @classmethod
    def _named_tool_choice(cls, value: Any) -> Any:
        if isinstance(value, dict):
            raise ValueError(
                "only 'auto' and 'none' are supported (the policy samples freely; a forced "
                "tool call would need constrained decoding)"
            )
        return value

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        stops = [value] if isinstance(value, str) else list(value or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("give at most 4 non-empty stop strings")
        return value

    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def plain_messages(self) -> list[dict[str, Any]]:
        return [m.model_dump(exclude_none=True) for m in self.messages]

    def plain_tools(self) -> list[dict[str, Any]] | None:
        if not self.tools:
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]


def field_name(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the field path a user wrote: `messages[2].content`."""
    parts: list[str] = []
    for item in loc:
        if item == "body":
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("str", "list[TextPart]", "function-after[_named_tool_choice(), ...]"):
            continue  # union branch names
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "body"

"""The `ToolSet`: runs a model's tool calls against typed Python tools, safely.

Tools are plain typed functions; their schemas come from `forge_agent.toolkit.schema` (`tool`,
`tool_spec`, `validate_arguments`, re-exported here).

`ToolSet.call(tool_call)` never raises: an unknown tool, malformed JSON, arguments of the
wrong type, an exception, a timeout, each comes back as a tool message starting with
"Error:" that the model can read, and is counted in `ToolSet.error_counts` by kind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import json
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from forge_agent.toolkit.schema import (
    SANDBOX_PARAM,
    describe_value,
    loads_strict,
    short_text,
    signature_text,
    tool,
    tool_spec,
    validate_arguments,
)
from forge_agent.types import Message, ToolSpec

if TYPE_CHECKING:
    from forge_agent.sandbox.base import SandboxSession

__all__ = ["ToolError", "ToolSet", "tool", "tool_spec", "validate_arguments"]

ERROR_KINDS = (
    "bad_tool_call",  # the renderer could not parse the call (its parse_error says why)
    "too_many_calls",  # calls past max_calls_per_message in one assistant message
    "tool_reported",  # the tool ran and returned an "Error: ..." text
    "not_a_dict",  # the tool call is not a dict
    "missing_field",  # no function / name in the call
    "bad_type",  # the call's "type" is not "function"
    "unknown_tool",  # no tool of that name
    "arguments_too_large",  # the argument text exceeds max_argument_chars
    "bad_json",  # arguments are not valid JSON
    "bad_arguments",  # missing, unknown or wrongly typed arguments
    "no_sandbox",  # the tool needs a sandbox and the ToolSet has none
    "exception",  # the tool raised
    "timeout",  # the tool ran past timeout_s
    "output_truncated",  # the output was cut to max_output_chars (the call still succeeded)
    "mcp_server_error",  # an MCP server answered with an error (ToolError)
    "mcp_server_crash",  # an MCP server died or cannot be restarted (ToolError)
)
"""The keys `ToolSet.error_counts` may hold (a `ToolError` may add its own kind)."""


class ToolError(Exception):
    """Raised by a tool for a failure it can name: the model reads ``Error: <message>`` (no
    exception type, no traceback) and `ToolSet.error_counts[kind]` counts it."""

    def __init__(self, message: str, kind: str = "exception") -> None:
        super().__init__(message)
        self.kind = kind


class _Refused(Exception):
    """A tool call refused before it runs: the error kind, the tool name its message carries
    and the text the model reads."""

    def __init__(self, kind: str, name: str, text: str) -> None:
        super().__init__(text)
        self.kind, self.name, self.text = kind, name, text


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


# --------------------------------------------------------------------------------------------
# ToolSet
# --------------------------------------------------------------------------------------------


class ToolSet:
    """Tools bound to one env instance (and its sandbox); runs a model's tool calls safely.

    Args:
        tools: tool functions (sync or async), with or without `@tool`.
        sandbox: passed to every tool that declares a keyword-only `sandbox` parameter.
        timeout_s: wall-clock bound of one call. A sync tool that overruns keeps running in its
            (daemon) thread; bound real work with the sandbox's own limits.
        max_output_chars: longer outputs are cut, with a visible "...[truncated N chars]".
        max_argument_chars: longer argument strings are refused without being parsed.
        max_calls_per_message: calls past this many in one assistant message are not run;
            one error message answers them all.
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any]],
        sandbox: SandboxSession | None = None,
        timeout_s: float = 30.0,
        max_output_chars: int = 8_000,
        max_argument_chars: int = 100_000,
        max_calls_per_message: int = 8,
    ) -> None:
        self.sandbox = sandbox
        self.max_calls_per_message = max_calls_per_message
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars
        self.max_argument_chars = max_argument_chars
        self._tools: dict[str, Callable[..., Any]] = {}
        self._specs: dict[str, ToolSpec] = {}
        self._wants_sandbox: dict[str, bool] = {}
        for fn in tools:
            spec = tool_spec(fn)
            name = spec["function"]["name"]
            if name in self._tools:
                raise ValueError(f"two tools are named {name!r}; tool names must be unique")
            self._tools[name] = fn
            self._specs[name] = spec
            param = inspect.signature(fn).parameters.get(SANDBOX_PARAM)
            self._wants_sandbox[name] = (
                param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY
            )
        self.error_counts: collections.Counter[str] = collections.Counter()
        self.call_counts: collections.Counter[str] = collections.Counter()

    @property
    def specs(self) -> list[ToolSpec]:
        """The tools' schemas, in the order the tools were given."""
        return list(self._specs.values())

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def num_calls(self) -> int:
        return sum(self.call_counts.values())

    @property
    def num_errors(self) -> int:
        """Calls the model sees answered with an error: failed calls and tools that returned
        an "Error: ..." text (truncated outputs are counted apart, in error_counts only)."""
        return sum(n for kind, n in self.error_counts.items() if kind != "output_truncated")

    async def call_all(self, tool_calls: Iterable[Any]) -> list[Message]:
        """Run tool calls one after another, in order; one tool message per call, except that
        calls past `max_calls_per_message` are answered by one error message together."""
        calls = list(tool_calls)
        messages = [await self.call(c) for c in calls[: self.max_calls_per_message]]
        extra = calls[self.max_calls_per_message :]
        if extra:
            first = extra[0] if isinstance(extra[0], dict) else {}
            call_id = first.get("id") if isinstance(first.get("id"), str) else ""
            messages.append(
                self._error(
                    "too_many_calls",
                    call_id,
                    "unknown",
                    f"{len(calls)} tool calls in one message; at most "
                    f"{self.max_calls_per_message} run, the other {len(extra)} were skipped",
                )
            )
        return messages

    async def call(self, tool_call: dict[str, Any]) -> Message:
        """Run one OpenAI-style tool call and return its tool message; never raises.

        Accepts `{"id", "type": "function", "function": {"name", "arguments"}}` where
        arguments is a JSON string or a dict; the flat `{"name", "arguments"}` shape and a
        missing id are tolerated.
        """
        call_id = tool_call.get("id") if isinstance(tool_call, dict) else None
        call_id = call_id if isinstance(call_id, str) else ""
        try:
            name, arguments = self._read_call(tool_call)
            kwargs = self._checked_kwargs(name, arguments)
        except _Refused as refused:
            return self._error(refused.kind, call_id, refused.name, refused.text)
        self.call_counts[name] += 1
        try:
            output = await asyncio.wait_for(self._run(self._tools[name], kwargs), self.timeout_s)
        except TimeoutError:
            return self._error(
                "timeout", call_id, name, f"tool {name!r} timed out after {self.timeout_s:g} s"
            )
        except ToolError as exc:
            return self._error(exc.kind, call_id, name, f"tool {name!r} failed: {exc}")
        except Exception as exc:
            return self._error(
                "exception", call_id, name, f"tool {name!r} raised {type(exc).__name__}: {exc}"
            )
        text = _to_text(output)
        if text.startswith("Error:"):  # the tool says it failed: the model sees an error
            self.error_counts["tool_reported"] += 1
        return _tool_message(call_id, name, self._truncate(text))

    def _read_call(self, tool_call: Any) -> tuple[str, Any]:
        """(a known tool's name, the call's raw arguments); `_Refused` for a call that is not
        a dict, that the renderer could not parse, of another type than "function", without a
        function or a name, or naming no tool of this set."""
        if not isinstance(tool_call, dict):
            raise _Refused(
                "not_a_dict",
                "unknown",
                f"a tool call must be an object with 'function': {{'name', 'arguments'}}, got "
                f"{describe_value(tool_call)}",
            )
        parse_error = tool_call.get("parse_error")
        if isinstance(parse_error, str) and parse_error:
            function = tool_call.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            shown = _clip(name) if isinstance(name, str) and name else "unknown"
            raise _Refused("bad_tool_call", shown, parse_error)
        call_type = tool_call.get("type", "function")
        if call_type != "function":
            raise _Refused(
                "bad_type",
                "unknown",
                f"tool call type must be 'function', got {short_text(call_type)}",
            )
        function = tool_call.get("function", tool_call if "name" in tool_call else None)
        if not isinstance(function, dict):
            raise _Refused(
                "missing_field",
                "unknown",
                "the tool call has no 'function' object with a 'name' and 'arguments'",
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise _Refused(
                "missing_field",
                "unknown",
                f"the tool call has no tool name (got {short_text(name)})",
            )
        if name not in self._tools:
            raise _Refused(
                "unknown_tool",
                _clip(name),
                f"unknown tool {_clip(name)!r}; available: {', '.join(self._tools) or 'none'}",
            )
        return name, function.get("arguments", {})

    def _checked_kwargs(self, name: str, arguments: Any) -> dict[str, Any]:
        """The keyword arguments tool `name` is called with: `arguments` (a JSON string or a
        dict) within `max_argument_chars`, valid JSON, matching the tool's schema, and the
        sandbox for a tool that takes one; `_Refused` otherwise."""
        if arguments is None or arguments == "":
            arguments = {}
        if isinstance(arguments, str):
            self._check_size(len(arguments), name)
            try:
                arguments = loads_strict(arguments, f"the arguments of {name!r}")
            except ValueError as exc:
                raise _Refused("bad_json", name, str(exc)) from None
        elif isinstance(arguments, dict):
            try:
                size = len(json.dumps(arguments))
            except (TypeError, ValueError, RecursionError):
                raise _Refused(
                    "bad_arguments", name, f"arguments of {name!r} are not JSON data"
                ) from None
            self._check_size(size, name)
        parameters = self._specs[name]["function"]["parameters"]
        problems = validate_arguments(arguments, parameters)
        if problems:
            raise _Refused(
                "bad_arguments",
                name,
                f"bad arguments for {name!r}: {'; '.join(problems[:5])}. "
                f"Expected: {name}({signature_text(self._specs[name])})",
            )
        required = parameters.get("required", [])
        kwargs = {k: v for k, v in arguments.items() if v is not None or k in required}
        if self._wants_sandbox[name]:
            if self.sandbox is None:
                raise _Refused("no_sandbox", name, f"tool {name!r} needs a sandbox and none is set")
            kwargs[SANDBOX_PARAM] = self.sandbox
        return kwargs

    def _check_size(self, chars: int, name: str) -> None:
        if chars > self.max_argument_chars:
            raise _Refused(
                "arguments_too_large",
                name,
                f"arguments are {chars} characters long; at most {self.max_argument_chars} allowed",
            )

    async def _run(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(**kwargs)
        # A daemon thread per call: a tool that never returns cannot block interpreter exit
        # (the default executor's threads are joined at shutdown).
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: object) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        def deliver(ok: bool, value: object) -> None:
            # A tool that outlived its timeout may finish after the caller's loop closed.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, ok, value)

        def target() -> None:
            try:
                result = fn(**kwargs)
            except BaseException as exc:
                deliver(False, exc)
                return
            deliver(True, result)

        threading.Thread(
            target=target, name=f"tool-{getattr(fn, '__name__', 'call')}", daemon=True
        ).start()
        result = await future
        if inspect.isawaitable(result):
            result = await result
        return result

    def _truncate(self, text: str) -> str:
        if len(text) <= self.max_output_chars:
            return text
        self.error_counts["output_truncated"] += 1
        cut = len(text) - self.max_output_chars
        return f"{text[: self.max_output_chars]}\n...[truncated {cut} chars]"

    def _error(self, kind: str, call_id: str, name: str, text: str) -> Message:
        self.error_counts[kind] += 1
        return _tool_message(call_id, name, self._truncate(f"Error: {text}"))


def _tool_message(call_id: str, name: str, content: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def _to_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if output is None:
        return ""
    try:
        return json.dumps(output, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(output)

"""Tools as typed Python functions, and the `ToolSet` that runs a model's tool calls.

A tool is a plain function with type hints and a Google-style docstring:

    def calculator(expression: str) -> str:
        '''Evaluate an arithmetic expression exactly.

        Args:
            expression: The expression to evaluate, for example "(3 + 4) * 2".
        '''

`tool_spec(fn)` derives the OpenAI function-calling schema from the hints (str, int, float,
bool, list[...], dict[...], Literal[...], Optional[...]; a parameter with a default is not
required) and the docstring. A keyword-only parameter named `sandbox` is not part of the
schema: the `ToolSet` passes its sandbox there. `@tool` is optional; it only overrides the
name or description and checks the function once, at definition time.

`ToolSet.call(tool_call)` never raises: an unknown tool, malformed JSON, arguments of the
wrong type, an exception, a timeout, each comes back as a tool message starting with
"Error:" that the model can read, and is counted in `ToolSet.error_counts` by kind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from forge_agent.types import Message, ToolSpec

__all__ = ["ToolSet", "tool", "tool_spec", "validate_arguments"]

SANDBOX_PARAM = "sandbox"
"""Name of the keyword-only parameter through which a ToolSet injects its sandbox."""

ERROR_KINDS = (
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
)
"""The keys `ToolSet.error_counts` may hold."""

_SECTION_RE = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples|Example|Notes|Note)"
    r":\s*$"
)
_ARG_RE = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


# --------------------------------------------------------------------------------------------
# Schema derivation
# --------------------------------------------------------------------------------------------


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Mark a function as a tool, optionally renaming it or replacing its description.

    Usable bare (`@tool`) or with arguments (`@tool(name="calc")`). The schema is derived
    (and so checked) immediately and stored on the function as `__tool_spec__`.
    """

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__tool_spec__ = tool_spec(f, name=name, description=description)  # type: ignore[attr-defined]
        return f

    return decorate(fn) if fn is not None else decorate


def tool_spec(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> ToolSpec:
    """The OpenAI function-calling schema of `fn`, from its type hints and docstring.

    Raises:
        TypeError: when a parameter has no type hint, an unsupported one, or is *args/**kwargs.
    """
    if name is None and description is None and hasattr(fn, "__tool_spec__"):
        return copy.deepcopy(fn.__tool_spec__)  # type: ignore[attr-defined]
    fn_name = name or getattr(fn, "__name__", None)
    if not fn_name:
        raise TypeError(f"tool {fn!r} has no __name__; pass name=")
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # unresolvable forward references
        raise TypeError(f"could not resolve the type hints of tool {fn_name!r}: {exc}") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name == SANDBOX_PARAM and param.kind is inspect.Parameter.KEYWORD_ONLY:
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(
                f"tool {fn_name!r} has variadic parameter {param.name!r}; tools need named, "
                "typed parameters"
            )
        if param.name not in hints:
            raise TypeError(f"tool {fn_name!r} parameter {param.name!r} has no type hint")
        has_default = param.default is not inspect.Parameter.empty
        try:
            schema = _type_schema(hints[param.name], nullable_ok=has_default)
        except TypeError as exc:
            raise TypeError(f"tool {fn_name!r} parameter {param.name!r}: {exc}") from None
        if param.name in arg_docs:
            schema["description"] = arg_docs[param.name]
        properties[param.name] = schema
        if not has_default:
            required.append(param.name)
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {
            "name": fn_name,
            "description": description if description is not None else summary,
            "parameters": parameters,
        },
    }


def _type_schema(hint: Any, *, nullable_ok: bool = False) -> dict[str, Any]:
    """JSON schema of one type hint. Optional[X] with a default is X's schema."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return {}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is type(None):
        return {"type": "null"}
    if hint in (list, tuple, set) or origin in (
        list,
        tuple,
        set,
        Sequence,
        collections.abc.Sequence,
    ):
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            args = args[:1]
        if origin is tuple and len(args) > 1:
            return {
                "type": "array",
                "prefixItems": [_type_schema(a) for a in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"dict keys must be str for JSON, got {args[0]!r}")
        schema: dict[str, Any] = {"type": "object"}
        if args and args[1] is not Any:
            schema["additionalProperties"] = _type_schema(args[1])
        return schema
    if origin is Literal:
        values = list(args)
        kinds = {_json_type_name(v) for v in values}
        schema = {"enum": values}
        if len(kinds) == 1:
            schema["type"] = kinds.pop()
        return schema
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        if len(members) == 1:
            inner = _type_schema(members[0])
            if nullable and not nullable_ok:
                return {"anyOf": [inner, {"type": "null"}]}
            return inner
        any_of = [_type_schema(a) for a in members] + ([{"type": "null"}] if nullable else [])
        return {"anyOf": any_of}
    raise TypeError(
        f"unsupported type hint {hint!r}; expected str, int, float, bool, list[...], "
        "dict[str, ...], Literal[...], Optional[...] or a union of these"
    )


def _json_type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "string"


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {arg: description}) from a Google-style docstring."""
    lines = doc.splitlines()
    description: list[str] = []
    arg_docs: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent = 0
    for raw in lines:
        line = raw.rstrip()
        stripped = line.strip()
        match = _SECTION_RE.match(stripped)
        if match and not raw.startswith(" "):
            section = match.group(1)
            current = None
            continue
        if section is None:
            description.append(stripped)
        elif section in ("Args", "Arguments", "Parameters") and stripped:
            indent = len(line) - len(line.lstrip())
            arg = _ARG_RE.match(stripped)
            if arg and (current is None or indent <= arg_indent):
                current = arg.group(1).lstrip("*")
                arg_indent = indent
                arg_docs[current] = arg.group(3).strip()
            elif current is not None:
                arg_docs[current] = f"{arg_docs[current]} {stripped}".strip()
    text = "\n".join(description).strip()
    text = re.sub(r"(?<!\n)\n(?!\n)", " ", text)  # join wrapped lines, keep paragraphs
    return text, arg_docs


# --------------------------------------------------------------------------------------------
# Argument validation
# --------------------------------------------------------------------------------------------


def validate_arguments(arguments: Any, parameters: dict[str, Any]) -> list[str]:
    """Check decoded tool arguments against a parameters schema; return the problems found.

    Booleans are not integers here (JSON true is not 1) and integral floats are not integers.
    """
    if not isinstance(arguments, dict):
        return [f"arguments must be a JSON object, got {_describe(arguments)}"]
    problems: list[str] = []
    properties = parameters.get("properties", {})
    for name in parameters.get("required", []):
        if name not in arguments:
            problems.append(f"missing required argument {name!r}")
    if parameters.get("additionalProperties", True) is False:
        for name in arguments:
            if name not in properties:
                problems.append(
                    f"unexpected argument {_short(name)}; expected "
                    f"{', '.join(properties) or 'no arguments'}"
                )
    required = parameters.get("required", [])
    for name, value in arguments.items():
        if value is None and name not in required:
            continue  # null for an optional argument means "use the default"
        if name in properties:
            problems.extend(_check_value(value, properties[name], f"argument {name!r}"))
    return problems


def _check_value(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    if "anyOf" in schema:
        if any(not _check_value(value, option, where) for option in schema["anyOf"]):
            return []
        kinds = " or ".join(_schema_name(option) for option in schema["anyOf"])
        return [f"{where} must be {kinds}, got {_describe(value)}"]
    if "enum" in schema:
        if not any(value == v and type(value) is type(v) for v in schema["enum"]):
            choices = ", ".join(json.dumps(v) for v in schema["enum"])
            return [f"{where} must be one of {choices}; got {_describe(value)}"]
        return []
    kind = schema.get("type")
    if kind is None:
        return []
    if isinstance(kind, list):
        if any(not _check_value(value, {**schema, "type": k}, where) for k in kind):
            return []
        return [f"{where} must be {' or '.join(kind)}, got {_describe(value)}"]
    if not _is_json_type(value, kind):
        return [f"{where} must be {_schema_name(schema)}, got {_describe(value)}"]
    problems: list[str] = []
    if kind == "array":
        if "prefixItems" in schema:
            items = schema["prefixItems"]
            if len(value) != len(items):
                return [f"{where} must have {len(items)} items, got {len(value)}"]
            for i, (item, item_schema) in enumerate(zip(value, items, strict=False)):
                problems += _check_value(item, item_schema, f"{where}[{i}]")
        elif "items" in schema:
            for i, item in enumerate(value):
                problems += _check_value(item, schema["items"], f"{where}[{i}]")
                if problems:
                    break
    elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            problems += _check_value(item, schema["additionalProperties"], f"{where}[{key!r}]")
            if problems:
                break
    return problems


def _is_json_type(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "null":
        return value is None
    return True


def _schema_name(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "any value")
    if kind == "array" and isinstance(schema.get("items"), dict) and "type" in schema["items"]:
        return f"an array of {_schema_name(schema['items'])}"
    article = "an" if str(kind)[0] in "aeiou" else "a"
    return f"{article} {kind}" if kind != "null" else "null"


def _describe(value: Any) -> str:
    kind = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    return f"{kind} {_short(value)}" if value is not None else "null"


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


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
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any]],
        sandbox: Any = None,
        timeout_s: float = 30.0,
        max_output_chars: int = 8_000,
        max_argument_chars: int = 100_000,
    ) -> None:
        self.sandbox = sandbox
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
        """Failed calls (truncated outputs are counted apart, in error_counts only)."""
        return sum(n for kind, n in self.error_counts.items() if kind != "output_truncated")

    async def call_all(self, tool_calls: Iterable[Any]) -> list[Message]:
        """Run tool calls one after another, in order; one tool message per call."""
        return [await self.call(tool_call) for tool_call in tool_calls]

    async def call(self, tool_call: Any) -> Message:
        """Run one OpenAI-style tool call and return its tool message; never raises.

        Accepts `{"id", "type": "function", "function": {"name", "arguments"}}` where
        arguments is a JSON string or a dict; the flat `{"name", "arguments"}` shape and a
        missing id are tolerated.
        """
        if not isinstance(tool_call, dict):
            return self._error(
                "not_a_dict",
                "",
                "unknown",
                f"a tool call must be an object with 'function': {{'name', 'arguments'}}, got "
                f"{_describe(tool_call)}",
            )
        call_id = tool_call.get("id")
        call_id = call_id if isinstance(call_id, str) else ""
        call_type = tool_call.get("type", "function")
        if call_type != "function":
            return self._error(
                "bad_type",
                call_id,
                "unknown",
                f"tool call type must be 'function', got {_short(call_type)}",
            )
        function = tool_call.get("function", tool_call if "name" in tool_call else None)
        if not isinstance(function, dict):
            return self._error(
                "missing_field",
                call_id,
                "unknown",
                "the tool call has no 'function' object with a 'name' and 'arguments'",
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return self._error(
                "missing_field",
                call_id,
                "unknown",
                f"the tool call has no tool name (got {_short(name)})",
            )
        if name not in self._tools:
            return self._error(
                "unknown_tool",
                call_id,
                _clip(name),
                f"unknown tool {_clip(name)!r}; available: {', '.join(self._tools) or 'none'}",
            )
        arguments = function.get("arguments", {})
        if arguments is None or arguments == "":
            arguments = {}
        if isinstance(arguments, str):
            if len(arguments) > self.max_argument_chars:
                return self._error(
                    "arguments_too_large",
                    call_id,
                    name,
                    f"arguments are {len(arguments)} characters long; at most "
                    f"{self.max_argument_chars} allowed",
                )
            try:
                arguments = json.loads(arguments)
            except (json.JSONDecodeError, RecursionError) as exc:
                return self._error(
                    "bad_json", call_id, name, f"arguments of {name!r} are not valid JSON: {exc}"
                )
        elif isinstance(arguments, dict):
            try:
                size = len(json.dumps(arguments))
            except (TypeError, ValueError, RecursionError):
                return self._error(
                    "bad_arguments", call_id, name, f"arguments of {name!r} are not JSON data"
                )
            if size > self.max_argument_chars:
                return self._error(
                    "arguments_too_large",
                    call_id,
                    name,
                    f"arguments are {size} characters long; at most {self.max_argument_chars} "
                    "allowed",
                )
        problems = validate_arguments(arguments, self._specs[name]["function"]["parameters"])
        if problems:
            return self._error(
                "bad_arguments",
                call_id,
                name,
                f"bad arguments for {name!r}: {'; '.join(problems[:5])}. "
                f"Expected: {name}({_signature_text(self._specs[name])})",
            )
        required = self._specs[name]["function"]["parameters"].get("required", [])
        kwargs = {k: v for k, v in arguments.items() if v is not None or k in required}
        if self._wants_sandbox[name]:
            if self.sandbox is None:
                return self._error(
                    "no_sandbox", call_id, name, f"tool {name!r} needs a sandbox and none is set"
                )
            kwargs[SANDBOX_PARAM] = self.sandbox
        self.call_counts[name] += 1
        try:
            output = await asyncio.wait_for(self._run(self._tools[name], kwargs), self.timeout_s)
        except TimeoutError:
            return self._error(
                "timeout", call_id, name, f"tool {name!r} timed out after {self.timeout_s:g} s"
            )
        except Exception as exc:
            return self._error(
                "exception", call_id, name, f"tool {name!r} raised {type(exc).__name__}: {exc}"
            )
        return _tool_message(call_id, name, self._truncate(_to_text(output)))

    async def _run(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(**kwargs)
        # A daemon thread per call: a tool that never returns cannot block interpreter exit
        # (the default executor's threads are joined at shutdown).
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

        def deliver(ok: bool, value: Any) -> None:
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


def _signature_text(spec: ToolSpec) -> str:
    """`a: integer, b: array of integer, mode: "x" | "y" = optional` for error messages."""
    parameters = spec["function"]["parameters"]
    required = set(parameters.get("required", []))
    parts = []
    for pname, schema in parameters.get("properties", {}).items():
        if "enum" in schema:
            kind = " | ".join(json.dumps(v) for v in schema["enum"])
        elif "anyOf" in schema:
            kind = " | ".join(_schema_name(o).split(" ", 1)[-1] for o in schema["anyOf"])
        else:
            kind = _schema_name(schema).split(" ", 1)[-1]
        parts.append(f"{pname}: {kind}" + ("" if pname in required else " (optional)"))
    return ", ".join(parts)


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

"""Tool schemas: the OpenAI function-calling schema of a typed Python function, and checks of
a tool call's arguments against it.

A tool is a plain function with type hints and a Google-style docstring:

    def calculator(expression: str) -> str:
        '''Evaluate an arithmetic expression exactly.

        Args:
            expression: The expression to evaluate, for example "(3 + 4) * 2".
        '''

`tool_spec(fn)` derives the OpenAI function-calling schema from the hints (str, int, float,
bool, list[...], dict[...], Literal[...], Optional[...]; a parameter with a default is not
required) and the docstring. A keyword-only parameter named `sandbox` is not part of the
schema: the `ToolSet` (`forge_agent.toolkit.toolset`) passes its sandbox there. `@tool` is
optional; it only overrides the name or description and checks the function once, at
definition time.
`validate_arguments` lists what is wrong with decoded arguments, in words a model can read.
"""

from __future__ import annotations

import collections
import copy
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal

from forge_agent.types import ToolSpec

__all__ = [
    "JSON_MAX_DEPTH",
    "SANDBOX_PARAM",
    "ToolSchemaError",
    "describe_value",
    "loads_strict",
    "short_text",
    "signature_text",
    "tool",
    "tool_spec",
    "validate_arguments",
]


class ToolSchemaError(TypeError):
    """A tool function whose schema cannot be derived; the message names the function (with
    its file and line) and the parameter at fault."""


def _where(fn: Callable[..., Any]) -> str:
    """`price (shop/env.py:12)`: a tool function's name and where it is defined."""
    target = inspect.unwrap(fn)
    name = getattr(target, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    try:
        return f"{name} ({inspect.getsourcefile(target)}:{inspect.getsourcelines(target)[1]})"
    except (OSError, TypeError):
        return str(name)


SANDBOX_PARAM = "sandbox"
"""Name of the keyword-only parameter through which a ToolSet injects its sandbox."""

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
        ToolSchemaError: (a TypeError) when a parameter has no type hint, an unsupported one,
            or is *args/**kwargs; it names the function, its file and line, and the parameter.
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
        raise ToolSchemaError(
            f"could not resolve the type hints of tool function {_where(fn)}: {exc}"
        ) from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name == SANDBOX_PARAM and param.kind is inspect.Parameter.KEYWORD_ONLY:
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolSchemaError(
                f"tool function {_where(fn)} has variadic parameter {param.name!r}; tools need "
                "named, typed parameters"
            )
        if param.name not in hints:
            raise ToolSchemaError(
                f"tool function {_where(fn)}: parameter {param.name!r} has no type hint (the "
                f"policy is shown a schema built from the hints; write e.g. `{param.name}: str`)"
            )
        has_default = param.default is not inspect.Parameter.empty
        try:
            schema = _type_schema(hints[param.name], nullable_ok=has_default)
        except TypeError as exc:
            raise ToolSchemaError(
                f"tool function {_where(fn)}: parameter {param.name!r}: {exc}"
            ) from None
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


def validate_arguments(arguments: object, parameters: dict[str, Any]) -> list[str]:
    """Check decoded tool arguments against a parameters schema; return the problems found.

    Booleans are not integers here (JSON true is not 1) and integral floats are not integers.
    """
    if not isinstance(arguments, dict):
        return [f"arguments must be a JSON object, got {describe_value(arguments)}"]
    problems: list[str] = []
    properties = parameters.get("properties", {})
    for name in parameters.get("required", []):
        if name not in arguments:
            problems.append(f"missing required argument {name!r}")
    if parameters.get("additionalProperties", True) is False:
        for name in arguments:
            if name not in properties:
                problems.append(
                    f"unexpected argument {short_text(name)}; expected "
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
        return [f"{where} must be {kinds}, got {describe_value(value)}"]
    if "enum" in schema:
        if not any(value == v and type(value) is type(v) for v in schema["enum"]):
            choices = ", ".join(json.dumps(v) for v in schema["enum"])
            return [f"{where} must be one of {choices}; got {describe_value(value)}"]
        return []
    kind = schema.get("type")
    if kind is None:
        return []
    if isinstance(kind, list):
        if any(not _check_value(value, {**schema, "type": k}, where) for k in kind):
            return []
        return [f"{where} must be {' or '.join(kind)}, got {describe_value(value)}"]
    if not _is_json_type(value, kind):
        return [f"{where} must be {_schema_name(schema)}, got {describe_value(value)}"]
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


def describe_value(value: object) -> str:
    """The JSON kind of ``value`` and its short text, e.g. ``integer 3``, for error messages."""
    kind = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    return f"{kind} {short_text(value)}" if value is not None else "null"


def short_text(value: object, limit: int = 60) -> str:
    """``value`` as JSON (or its repr), cut to ``limit`` characters, for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def signature_text(spec: ToolSpec) -> str:
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


# --------------------------------------------------------------------------------------------
# Strict JSON for tool calls
# --------------------------------------------------------------------------------------------

JSON_MAX_DEPTH = 64
"""Deepest nesting of brackets a tool call may have (deeper text is refused unparsed)."""


def _nesting_depth(text: str) -> int:
    """The deepest bracket nesting of `text` outside strings (linear scan, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {short_text(key)} in a JSON object")
        seen[key] = value
    return seen


def loads_strict(text: str, what: str = "the JSON") -> Any:
    """Decode JSON text a model wrote, refusing duplicate keys and deep nesting.

    Raises:
        ValueError: with a message a model can act on: where the syntax breaks (line, column,
            character), which key is duplicated, or how deep the nesting goes.
    """
    depth = _nesting_depth(text)
    if depth > JSON_MAX_DEPTH:
        raise ValueError(f"{what} is nested {depth} levels deep; at most {JSON_MAX_DEPTH} allowed")
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        near = text[max(0, exc.pos - 15) : exc.pos + 15]
        hint = ""
        if exc.msg.startswith("Expecting property name enclosed in double quotes"):
            hint = " (keys and strings need double quotes; no trailing commas)"
        elif exc.msg.startswith("Expecting value") and "'" in text:
            hint = " (strings need double quotes, not single quotes)"
        raise ValueError(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
            f"(char {exc.pos}, near {near!r}){hint}"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{what} has a {exc}") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply") from None

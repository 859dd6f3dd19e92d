"""ToolSet: schemas from type hints and docstrings; every broken call becomes an error message."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Literal, Optional

import pytest

from forge_agent.toolkit.schema import ToolSchemaError
from forge_agent.toolkit.toolset import ToolSet, tool, tool_spec, validate_arguments


def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend, which has a
            description over two lines.

    Returns:
        The sum.
    """
    return a + b


def echo(text: str) -> str:
    """Repeat the text.

    Args:
        text: What to repeat.
    """
    return text


def kinds(
    flag: bool,
    ratio: float,
    names: list[str],
    table: dict[str, int],
    mode: Literal["fast", "slow"] = "fast",
    note: Optional[str] = None,  # noqa: UP045 - Optional is part of what is tested
    limit: int | None = None,
) -> str:
    """Exercise every supported type.

    Args:
        flag: A boolean.
        ratio: A number.
        names: Some names.
        table: A mapping.
        mode: Speed.
        note: Free text.
        limit: A bound.
    """
    return json.dumps([flag, ratio, names, table, mode, note, limit])


def boom(x: int) -> str:
    """Always fails.

    Args:
        x: Ignored.
    """
    raise RuntimeError(f"kaboom {x}")


def sleepy(seconds: float) -> str:
    """Sleep (in a thread).

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "woke"


async def async_sleepy(seconds: float) -> str:
    """Sleep (on the event loop).

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "woke"


def big(n: int) -> str:
    """Return n characters.

    Args:
        n: How many.
    """
    return "x" * n


def uses_sandbox(path: str, *, sandbox: Any) -> str:
    """Read a path from the sandbox.

    Args:
        path: The path.
    """
    return f"{sandbox}:{path}"


def call(name: str, arguments: Any, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def run(toolset: ToolSet, tool_call: Any) -> dict[str, Any]:
    return asyncio.run(toolset.call(tool_call))


# ---------------------------------------------------------------- schema derivation


def test_schema_has_name_summary_types_and_arg_descriptions() -> None:
    spec = tool_spec(add)
    assert spec["type"] == "function"
    fn = spec["function"]
    assert fn["name"] == "add"
    assert fn["description"] == "Add two integers."
    assert fn["parameters"]["properties"]["a"] == {
        "type": "integer",
        "description": "The first addend.",
    }
    assert fn["parameters"]["properties"]["b"]["description"] == (
        "The second addend, which has a description over two lines."
    )
    assert fn["parameters"]["required"] == ["a"]  # b has a default
    assert fn["parameters"]["additionalProperties"] is False


def test_schema_maps_every_supported_type() -> None:
    props = tool_spec(kinds)["function"]["parameters"]["properties"]
    assert props["flag"]["type"] == "boolean"
    assert props["ratio"]["type"] == "number"
    assert props["names"]["type"] == "array" and props["names"]["items"] == {"type": "string"}
    assert props["table"]["type"] == "object"
    assert props["table"]["additionalProperties"] == {"type": "integer"}
    assert props["mode"]["enum"] == ["fast", "slow"] and props["mode"]["type"] == "string"
    assert props["note"]["type"] == "string"  # Optional with a default: not required
    assert props["limit"]["type"] == "integer"
    assert tool_spec(kinds)["function"]["parameters"]["required"] == [
        "flag",
        "ratio",
        "names",
        "table",
    ]


def test_sandbox_parameter_is_not_in_the_schema() -> None:
    params = tool_spec(uses_sandbox)["function"]["parameters"]
    assert list(params["properties"]) == ["path"]
    assert params["required"] == ["path"]


def test_tool_decorator_renames_and_keeps_function_callable() -> None:
    @tool(name="plus", description="Adds.")
    def plus_fn(a: int) -> int:
        return a + 1

    @tool
    def bare(a: int) -> int:
        """Bare decorator."""
        return a

    assert tool_spec(plus_fn)["function"]["name"] == "plus"
    assert tool_spec(plus_fn)["function"]["description"] == "Adds."
    assert plus_fn(1) == 2
    assert tool_spec(bare)["function"]["description"] == "Bare decorator."


def test_untyped_or_variadic_parameters_are_rejected_with_their_name() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def variadic(*args: int) -> int:
        return 0

    with pytest.raises(TypeError, match="'x' has no type hint"):
        tool_spec(untyped)
    with pytest.raises(TypeError, match="variadic parameter 'args'"):
        tool_spec(variadic)


def test_a_missing_type_hint_names_the_tool_function_its_line_and_the_parameter() -> None:
    import functools

    def price(item, qty: int) -> str:  # type: ignore[no-untyped-def]
        return "3"

    @functools.wraps(price)
    def logged(*args, **kwargs):  # a user's decorator: the message names `price`, not it
        return price(*args, **kwargs)

    line = price.__code__.co_firstlineno
    for fn in (price, logged):
        with pytest.raises(ToolSchemaError) as raised:
            tool_spec(fn)
        message = str(raised.value)
        assert "price" in message and f"test_toolset.py:{line}" in message, message
        assert "parameter 'item' has no type hint" in message and "`item: str`" in message


def test_duplicate_tool_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="'add'"):
        ToolSet([add, add])


def test_toolset_specs_list_every_tool_in_order() -> None:
    toolset = ToolSet([add, echo])
    assert [s["function"]["name"] for s in toolset.specs] == ["add", "echo"]


# ---------------------------------------------------------------- successful calls


def test_call_with_json_string_arguments_returns_tool_message() -> None:
    toolset = ToolSet([add])
    msg = run(toolset, call("add", '{"a": 3, "b": 4}', "id-7"))
    assert msg == {"role": "tool", "tool_call_id": "id-7", "name": "add", "content": "7"}
    assert toolset.call_counts["add"] == 1 and not toolset.error_counts


def test_call_with_dict_arguments_and_defaults() -> None:
    assert run(ToolSet([add]), call("add", {"a": 3}))["content"] == "5"


def test_null_for_an_optional_argument_uses_its_default() -> None:
    args = {"flag": True, "ratio": 1, "names": [], "table": {}, "note": None}
    assert json.loads(run(ToolSet([kinds]), call("kinds", args))["content"])[5] is None


def test_flat_call_without_id_is_accepted() -> None:
    msg = run(ToolSet([echo]), {"name": "echo", "arguments": {"text": "hi"}})
    assert msg["content"] == "hi" and msg["tool_call_id"] == ""


def test_sandbox_is_injected() -> None:
    msg = run(ToolSet([uses_sandbox], sandbox="SB"), call("uses_sandbox", {"path": "/a"}))
    assert msg["content"] == "SB:/a"


def test_async_tool_runs_on_the_loop() -> None:
    assert run(ToolSet([async_sleepy]), call("async_sleepy", {"seconds": 0}))["content"] == "woke"


def test_call_all_keeps_order() -> None:
    toolset = ToolSet([add, echo])
    msgs = asyncio.run(
        toolset.call_all([call("echo", {"text": "a"}, "1"), call("add", {"a": 1}, "2")])
    )
    assert [(m["tool_call_id"], m["content"]) for m in msgs] == [("1", "a"), ("2", "3")]


# ---------------------------------------------------------------- broken calls

HUGE = json.dumps({"text": "y" * 200_000})
DEEP = "[" * 20_000 + "]" * 20_000

BROKEN_CALLS: list[tuple[str, Any, str]] = [
    # (case id, tool call, error kind)
    ("none", None, "not_a_dict"),
    ("string", "add(1, 2)", "not_a_dict"),
    ("list", [call("add", {"a": 1})], "not_a_dict"),
    ("number", 42, "not_a_dict"),
    ("empty-dict", {}, "missing_field"),
    ("function-is-string", {"id": "x", "function": "add"}, "missing_field"),
    ("function-is-list", {"id": "x", "function": ["add"]}, "missing_field"),
    ("no-name", {"id": "x", "function": {"arguments": "{}"}}, "missing_field"),
    ("name-is-int", {"id": "x", "function": {"name": 3, "arguments": "{}"}}, "missing_field"),
    ("name-is-empty", call("", {}), "missing_field"),
    ("type-not-function", {**call("add", {"a": 1}), "type": "code"}, "bad_type"),
    ("unknown-name", call("foo", {}), "unknown_tool"),
    ("unknown-name-case", call("ADD", {"a": 1}), "unknown_tool"),
    ("unknown-very-long-name", call("z" * 5000, {}), "unknown_tool"),
    ("bad-json", call("add", '{"a": 1'), "bad_json"),
    ("bad-json-single-quotes", call("add", "{'a': 1}"), "bad_json"),
    ("bad-json-trailing", call("add", '{"a": 1} extra'), "bad_json"),
    ("deeply-nested-json", call("add", DEEP), "bad_json"),
    ("json-array", call("add", "[1, 2]"), "bad_arguments"),
    ("json-number", call("add", "7"), "bad_arguments"),
    ("json-string", call("add", '"a=1"'), "bad_arguments"),
    ("arguments-is-list", call("add", [1, 2]), "bad_arguments"),
    ("arguments-is-int", call("add", 12), "bad_arguments"),
    ("missing-required", call("add", {"b": 1}), "bad_arguments"),
    ("extra-argument", call("add", {"a": 1, "c": 2}), "bad_arguments"),
    ("string-for-int", call("add", {"a": "1"}), "bad_arguments"),
    ("bool-for-int", call("add", {"a": True}), "bad_arguments"),
    ("float-for-int", call("add", {"a": 1.5}), "bad_arguments"),
    ("null-for-required", call("add", {"a": None}), "bad_arguments"),
    ("int-for-string", call("echo", {"text": 5}), "bad_arguments"),
    ("object-for-string", call("echo", {"text": {"nested": [1, {"x": None}]}}), "bad_arguments"),
    (
        "int-for-bool",
        call("kinds", {"flag": 1, "ratio": 1.0, "names": [], "table": {}}),
        "bad_arguments",
    ),
    (
        "bool-for-number",
        call("kinds", {"flag": True, "ratio": False, "names": [], "table": {}}),
        "bad_arguments",
    ),
    (
        "list-item-wrong",
        call("kinds", {"flag": True, "ratio": 1, "names": ["a", 2], "table": {}}),
        "bad_arguments",
    ),
    (
        "dict-value-wrong",
        call("kinds", {"flag": True, "ratio": 1, "names": [], "table": {"k": "v"}}),
        "bad_arguments",
    ),
    (
        "literal-not-allowed",
        call("kinds", {"flag": True, "ratio": 1, "names": [], "table": {}, "mode": "warp"}),
        "bad_arguments",
    ),
    ("huge-argument-string", call("echo", HUGE), "arguments_too_large"),
    ("huge-argument-dict", call("echo", {"text": "y" * 200_000}), "arguments_too_large"),
    ("non-json-dict-value", call("echo", {"text": object()}), "bad_arguments"),
    ("tool-raises", call("boom", {"x": 1}), "exception"),
    ("sandbox-missing", call("uses_sandbox", {"path": "/"}), "no_sandbox"),
]


@pytest.mark.parametrize(
    ("tool_call", "kind"), [c[1:] for c in BROKEN_CALLS], ids=[c[0] for c in BROKEN_CALLS]
)
def test_broken_call_becomes_an_error_message_and_a_counted_metric(
    tool_call: Any, kind: str
) -> None:
    toolset = ToolSet([add, echo, kinds, boom, uses_sandbox])
    msg = run(toolset, tool_call)
    assert msg["role"] == "tool"
    assert isinstance(msg["content"], str) and msg["content"].startswith("Error: ")
    assert isinstance(msg["tool_call_id"], str) and isinstance(msg["name"], str)
    assert len(msg["content"]) < 1_000
    assert toolset.error_counts == {kind: 1}
    assert toolset.num_errors == 1


def test_there_are_at_least_thirty_broken_call_cases() -> None:
    assert len(BROKEN_CALLS) >= 30


def test_unknown_tool_message_lists_available_tools() -> None:
    msg = run(ToolSet([add, echo]), call("foo", {}))
    assert msg["content"] == "Error: unknown tool 'foo'; available: add, echo"


def test_type_error_names_argument_expected_and_got() -> None:
    content = run(ToolSet([add]), call("add", {"a": True}))["content"]
    assert "argument 'a' must be an integer, got boolean true" in content
    assert "Expected: add(a: integer, b: integer (optional))" in content


def test_exception_text_reaches_the_model() -> None:
    content = run(ToolSet([boom]), call("boom", {"x": 9}))["content"]
    assert content == "Error: tool 'boom' raised RuntimeError: kaboom 9"


def test_sync_tool_past_timeout_becomes_timeout_error() -> None:
    toolset = ToolSet([sleepy], timeout_s=0.2)
    start = time.monotonic()
    msg = run(toolset, call("sleepy", {"seconds": 30}))
    assert time.monotonic() - start < 5
    assert msg["content"] == "Error: tool 'sleepy' timed out after 0.2 s"
    assert toolset.error_counts == {"timeout": 1}


def test_async_tool_past_timeout_becomes_timeout_error() -> None:
    toolset = ToolSet([async_sleepy], timeout_s=0.1)
    msg = run(toolset, call("async_sleepy", {"seconds": 30}))
    assert "timed out" in msg["content"] and toolset.error_counts["timeout"] == 1


def test_long_output_is_truncated_with_a_visible_marker() -> None:
    toolset = ToolSet([big], max_output_chars=100)
    content = run(toolset, call("big", {"n": 1334}))["content"]
    assert content == "x" * 100 + "\n...[truncated 1234 chars]"
    assert toolset.error_counts == {"output_truncated": 1}
    assert toolset.num_errors == 0  # truncation is counted, but the call succeeded


def test_output_at_the_limit_is_untouched() -> None:
    toolset = ToolSet([big], max_output_chars=100)
    assert run(toolset, call("big", {"n": 100}))["content"] == "x" * 100
    assert not toolset.error_counts


def test_validate_arguments_reports_every_problem() -> None:
    params = tool_spec(add)["function"]["parameters"]
    problems = validate_arguments({"b": "2", "z": 1}, params)
    assert len(problems) == 3

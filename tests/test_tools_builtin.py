"""The built-in tools: calculator, python, shell, read_file, write_file."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tools import calculator, python, read_file, shell, write_file
from tools.calculator import CalculatorError, evaluate

try:
    from sandbox_fixtures import bwrap_sandbox
except ImportError:  # tests/ is a package
    from tests.sandbox_fixtures import bwrap_sandbox  # noqa: F401


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(3 + 4) * 2 / 5", "2.8"),
        ("1 / 3", "1/3"),
        ("-7 // 2", "-4"),
        ("-7 % 3", "2"),
        ("2 ** 10", "1024"),
        ("2 ** -2", "0.25"),
        ("0.1 + 0.2", "0.3"),
        ("-(2 + 3)", "-5"),
        ("1e3", "1000"),
        ("4 ** 0.5", "2"),
        ("10 / 4", "2.5"),
        ("12345678901234567890 * 98765432109876543210", "1219326311370217952237463801111263526900"),
    ],
)
def test_calculator_is_exact(expression: str, expected: str) -> None:
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("2 ** 100000", "exponent too large"),
        ("9 ** 9 ** 9", "exponent too large"),
        ("__import__('os').system('id')", "unsupported syntax"),
        ("abc", "unsupported syntax"),
        ("1 +", "could not parse"),
        ("2 ^ 3", "'^' is not supported"),
        ("", "empty expression"),
        ("2 ** 0.5", "irrational"),
        ("True + 1", "unsupported value"),
    ],
)
def test_calculator_reports_errors(expression: str, message: str) -> None:
    result = calculator(expression)
    assert result.startswith("Error: ") and message in result, result


def test_evaluate_returns_fractions_and_raises() -> None:
    assert evaluate("1/3 + 1/6") == Fraction(1, 2)
    with pytest.raises(CalculatorError):
        evaluate("1/0")


def test_python_tool_reports_output_and_status(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session:
        assert python("print(6 * 7)", sandbox=session) == "stdout:\n42\nexit code 0"
        failed = python("raise SystemExit(3)", sandbox=session)
        assert failed.endswith("exit code 3")
        assert "ZeroDivisionError" in python("1/0", sandbox=session)
        assert python("", sandbox=session).startswith("Error:")


def test_shell_tool_runs_in_the_workspace(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session:
        assert shell("echo hi > a.txt && cat a.txt && pwd", sandbox=session) == (
            "stdout:\nhi\n/workspace\nexit code 0"
        )


def test_file_tools_round_trip_and_refuse_escapes(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session:
        assert write_file("dir/n.txt", "héllo", sandbox=session) == "Wrote 6 bytes to dir/n.txt"
        assert read_file("dir/n.txt", sandbox=session) == "héllo"
        assert shell("cat dir/n.txt", sandbox=session).startswith("stdout:\nhéllo")
        assert "absolute" in write_file("/etc/passwd", "x", sandbox=session)
        assert "leaves the workspace" in read_file("../../etc/passwd", sandbox=session)
        assert read_file("missing.txt", sandbox=session).startswith("Error: no such file")


def test_tool_docstrings_document_every_argument() -> None:
    import inspect

    for tool in (calculator, python, shell, read_file, write_file):
        doc = inspect.getdoc(tool) or ""
        params = [p for p in inspect.signature(tool).parameters if p != "sandbox"]
        assert "Args:" in doc, tool.__name__
        for name in params:
            assert f"    {name}: " in doc or f"\n{name}: " in doc, (tool.__name__, name)

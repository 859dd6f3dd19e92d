"""An exact-arithmetic calculator tool.

The expression is parsed with `ast` and evaluated by a whitelist evaluator over `Fraction`;
nothing is ever passed to `eval`. Supported: integers and decimals (``1.25``, ``1e3``),
``+ - * / // % **``, parentheses and unary ``+``/``-``.

Result formatting (what the model sees):
- an integer value prints as an integer: ``"42"``;
- a non-integer whose decimal expansion terminates prints as an exact decimal: ``"0.125"``;
- any other value prints as an exact reduced fraction: ``"1/3"``.

Bad input, division by zero and results that would be too large come back as a string that
starts with ``"Error: "`` (the tool never raises on user input). Programmatic callers (reward
functions, task generators) can use `evaluate`, which returns a `Fraction` or raises
`CalculatorError`.
"""

from __future__ import annotations

import ast
import functools
import warnings
from collections.abc import Callable
from fractions import Fraction

__all__ = [
    "CalculatorError",
    "calculator",
    "calculator_without_example",
    "evaluate",
    "format_number",
    "logging_calculator",
]

MAX_EXPRESSION_CHARS = 1_000
"""Longest expression accepted (bounds parse time and nesting depth)."""

MAX_RESULT_BITS = 3_400
"""Largest numerator/denominator of any intermediate value, in bits (about 1,000 digits)."""

_BINARY_OPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}


class CalculatorError(ValueError):
    """The expression is malformed, unsupported or has no exact, bounded value."""


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Supports integers, decimals, + - * / // % ** (power), parentheses and unary minus.
    Integer results print as integers, terminating decimals exactly, others as a fraction
    like 1/3.

    Args:
        expression: The arithmetic expression to evaluate, for example "(3 + 4) * 2 / 5".
    """
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        return f"Error: {exc}"


def _calculator_without_example(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Supports integers, decimals, + - * / // % ** (power), parentheses and unary minus.
    Integer results print as integers, terminating decimals exactly, others as a fraction
    like 1/3.

    Args:
        expression: The arithmetic expression to evaluate, written with the numbers of the
            problem.
    """
    return calculator(expression)


_calculator_without_example.__name__ = "calculator"
_calculator_without_example.__qualname__ = "calculator"

calculator_without_example = _calculator_without_example
"""`calculator` whose argument description shows no example expression. A real model copied
`calculator`'s example, `"(3 + 4) * 2 / 5"`, as its call, or its first digit into the call's
first number (issue 59, docs/real_model.md); the task families (`envs/calculator/families.py`)
offer this one. `calculator` keeps its example: the tiny model's tokenizer is trained on the
tool's description, and the default run's recorded results with it."""


def logging_calculator(log_chars: int) -> Callable[[str], str]:
    """`calculator` that writes an evaluation log of `log_chars` characters before its result.

    The reply is lines of the form `check 3: 37 * 12 = 444` (the expression re-evaluated,
    numbered) up to `log_chars` characters, then what `calculator` returns on its last line.
    Same name, docstring and schema as `calculator`. It exists to make tool outputs
    long at the same task (the speed bench's long-tool-output scenario, `apps/bench/vs_trl.py`);
    the rollout cuts tool messages to `rollout.tool_output_tokens` as for any tool.
    """
    if log_chars < 1:
        raise ValueError(f"log_chars must be >= 1, got {log_chars!r}")

    @functools.wraps(calculator)
    def logged(expression: str) -> str:
        result = calculator(expression)
        lines, size, k = [], 0, 1
        while size < log_chars:
            line = f"check {k}: {expression.strip()} = {result}"
            lines.append(line)
            size, k = size + len(line) + 1, k + 1
        return "\n".join(lines)[:log_chars] + "\n" + result

    return logged


def evaluate(expression: str) -> Fraction:
    """Evaluate `expression` exactly and return its value as a `Fraction`.

    Raises:
        CalculatorError: with a message naming the offending part of the expression.
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    text = expression.strip()
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"expression is {len(text)} characters long; at most {MAX_EXPRESSION_CHARS} allowed"
        )
    if "^" in text:
        raise CalculatorError("'^' is not supported; write powers as a ** b")
    try:
        with warnings.catch_warnings():  # model text can trip SyntaxWarnings; errors say enough
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise CalculatorError(f"could not parse {expression!r}: {_syntax_reason(exc)}") from None
    except RecursionError:
        raise CalculatorError(f"expression {expression!r} is nested too deeply") from None
    try:
        return _Evaluator(text).visit(tree.body)
    except RecursionError:
        raise CalculatorError(f"expression {expression!r} is nested too deeply") from None


def format_number(value: Fraction) -> str:
    """Format a `Fraction`: integer, exact terminating decimal, or ``p/q``."""
    if value.denominator == 1:
        return str(value.numerator)
    places = _terminating_places(value.denominator)
    if places is None:
        return f"{value.numerator}/{value.denominator}"
    sign = "-" if value < 0 else ""
    scaled = abs(value.numerator) * 10**places // value.denominator
    whole, frac = divmod(scaled, 10**places)
    return f"{sign}{whole}.{frac:0{places}d}".rstrip("0")


def _operand(value: Fraction) -> str:
    """`format_number`, parenthesized when it would not read as one operand."""
    text = format_number(value)
    return f"({text})" if value < 0 or "/" in text else text


def _terminating_places(denominator: int) -> int | None:
    """Decimal places of 1/denominator if its expansion terminates, else None."""
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    return max(twos, fives) if denominator == 1 else None


def _syntax_reason(exc: Exception) -> str:
    if isinstance(exc, SyntaxError) and exc.msg:
        where = f" at column {exc.offset}" if exc.offset else ""
        return f"{exc.msg}{where}"
    return str(exc)


class _Evaluator:
    """Walks a whitelisted subset of Python's expression AST over `Fraction`."""

    def __init__(self, source: str) -> None:
        self.source = source

    def visit(self, node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant):
            return self._constant(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self.visit(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
            left, right = self.visit(node.left), self.visit(node.right)
            return self._check_size(self._binary(node.op, left, right), node)
        raise CalculatorError(f"unsupported syntax {self._segment(node)!r}; {_SUPPORTED}")

    def _constant(self, node: ast.Constant) -> Fraction:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CalculatorError(f"unsupported value {self._segment(node)!r}; {_SUPPORTED}")
        if isinstance(value, int):
            return self._check_size(Fraction(value), node)
        # Parse the literal's own text so 0.1 means exactly 1/10, not the nearest float.
        literal = self._segment(node).replace("_", "")
        try:
            return self._check_size(Fraction(literal), node)
        except (ValueError, ZeroDivisionError):
            return self._check_size(Fraction(value), node)

    def _binary(self, op: ast.operator, left: Fraction, right: Fraction) -> Fraction:
        symbol = _BINARY_OPS[type(op)]
        if symbol in ("/", "//", "%") and right == 0:
            raise CalculatorError(f"division by zero in {_operand(left)} {symbol} 0")
        if symbol == "+":
            return left + right
        if symbol == "-":
            return left - right
        if symbol == "*":
            return left * right
        if symbol == "/":
            return left / right
        if symbol == "//":
            return Fraction(left // right)
        if symbol == "%":
            return left % right
        return _power(left, right)

    def _check_size(self, value: Fraction, node: ast.AST) -> Fraction:
        if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_RESULT_BITS:
            raise CalculatorError(
                f"result of {self._segment(node)!r} is too large "
                f"(more than about {MAX_RESULT_BITS * 3 // 10} digits)"
            )
        return value

    def _segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ast.dump(node)


_SUPPORTED = "only numbers, + - * / // % **, parentheses and unary minus are supported"


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    """Exact ``base ** exponent``; fractional exponents only when the root is exact."""
    if base == 0 and exponent < 0:
        raise CalculatorError(f"division by zero in 0 ** {_operand(exponent)}")
    if exponent.denominator != 1:
        return _exact_root_power(base, exponent)
    n = exponent.numerator
    if base in (0, 1):
        return base
    if base == -1:
        return Fraction(1 if n % 2 == 0 else -1)
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if (size - 1) * abs(n) > MAX_RESULT_BITS:
        raise CalculatorError(
            f"exponent too large: {_operand(base)} ** {_operand(exponent)} would have more "
            f"than about {MAX_RESULT_BITS * 3 // 10} digits"
        )
    return base**n


def _exact_root_power(base: Fraction, exponent: Fraction) -> Fraction:
    q = exponent.denominator
    if base < 0:
        raise CalculatorError(
            f"{_operand(base)} ** {_operand(exponent)} is not a real rational number"
        )
    if q > 64:
        raise CalculatorError(f"fractional exponent {_operand(exponent)} is not supported")
    num, den = _int_root(base.numerator, q), _int_root(base.denominator, q)
    if num is None or den is None:
        raise CalculatorError(
            f"{_operand(base)} ** {_operand(exponent)} is irrational; "
            "only exact roots are supported"
        )
    return _power(Fraction(num, den), Fraction(exponent.numerator))


def _int_root(value: int, degree: int) -> int | None:
    """The exact integer `degree`-th root of a non-negative int, or None if not a perfect power."""
    if value < 2:
        return value
    guess = 1 << -(-value.bit_length() // degree)  # an upper bound on the root
    while True:  # Newton's method for the floor of the root
        better = ((degree - 1) * guess + value // guess ** (degree - 1)) // degree
        if better >= guess:
            break
        guess = better
    return guess if guess**degree == value else None

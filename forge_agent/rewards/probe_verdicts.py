"""The outside half of split tests: decode what the probe reported and decide each test.

Runs on the host, in the process that holds the checks (`forge_agent.rewards.probes`). What
it reads came from the graded process, so it is data that may be forged: it is decoded into
plain values (never unpickled, never evaluated), any value the probe could not carry is an
`Opaque` that equals nothing, and the host applies only bounded operations to it (comparisons,
arithmetic on numbers, `abs`, `round`, `math.isclose`, a task's own regular expression).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from numbers import Number
from typing import Any

from forge_agent.rewards.probes import SplitTests, fold

__all__ = ["Opaque", "Outcomes", "decode", "evaluate", "fired", "judge_test"]

_CALLS = {"abs": abs, "round": round, "math.fabs": math.fabs, "math.isclose": math.isclose,
          "float": float, "int": int}  # fmt: skip
_BINOPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
           "/": lambda a, b: a / b, "//": lambda a, b: a // b, "%": lambda a, b: a % b}  # fmt: skip
_COMPARE = {
    "Eq": lambda a, b: a == b, "NotEq": lambda a, b: a != b, "Lt": lambda a, b: a < b,
    "LtE": lambda a, b: a <= b, "Gt": lambda a, b: a > b, "GtE": lambda a, b: a >= b,
    "Is": lambda a, b: _same(a, b), "IsNot": lambda a, b: not _same(a, b),
    "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
}  # fmt: skip


_UNSET = object()

REGEX_TIMEOUT_S = 0.5
"""The longest one of a task's regular expressions may run on a value the graded code made."""


class RegexOverrun(Exception):
    """A task's regular expression ran past `REGEX_TIMEOUT_S` on a value of the graded code."""


def search(pattern: object, text: str) -> bool:
    """Whether `pattern` (a task's literal) matches somewhere in `text` (the graded code's
    value), with a time bound: the `regex` package (Python's `re` syntax) stops the match at
    `REGEX_TIMEOUT_S` and the check fails (`RegexOverrun`), so catastrophic backtracking on
    the policy's text costs its own episode half a second, never the env worker's thread."""
    import regex

    if not isinstance(pattern, (str, bytes)):
        raise TypeError("a pattern that is not text")
    try:
        return regex.search(pattern, text, timeout=REGEX_TIMEOUT_S) is not None
    except TimeoutError:
        raise RegexOverrun(f"its pattern ran past {REGEX_TIMEOUT_S} s on the value") from None


class Opaque:
    """A value the probe reported by its class name only (an object, or past the budget)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}>"


def _same(a: Any, b: Any) -> bool:
    """`is` over decoded values: identity for None and the booleans, else same type and value."""
    if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return type(a) is type(b) and a == b


def decode(e: object) -> Any:
    """The plain value of one tagged encoding (`probe_runtime.Probe.encode`). Raises
    ValueError for anything the probe never writes."""
    if not isinstance(e, list) or not e or not isinstance(e[0], str):
        raise ValueError(f"not an encoded value: {str(e)[:60]}")
    tag, rest = e[0], e[1:]
    scalars = {"n": lambda: None, "b": lambda: rest[0] is True, "i": lambda: int(rest[0]),
               "f": lambda: float(rest[0]), "s": lambda: str(rest[0]),
               "y": lambda: bytes.fromhex(rest[0]),
               "c": lambda: complex(float(rest[0]), float(rest[1])),
               "big": lambda: Opaque("a value past the size budget"),
               "o": lambda: Opaque(f"object of class {str(rest[0])[:80]}")}  # fmt: skip
    if tag in scalars:
        return scalars[tag]()
    kinds = {"l": list, "t": tuple, "set": set, "fset": frozenset}
    if tag in kinds and isinstance(rest[0], list):
        return kinds[tag](decode(x) for x in rest[0])
    if tag == "d" and isinstance(rest[0], list):
        return {decode(k): decode(v) for k, v in rest[0]}
    raise ValueError(f"unknown tag {tag[:20]!r}")


def _number(*values: Any) -> None:
    for v in values:
        if not isinstance(v, Number):
            raise TypeError(f"{type(v).__name__} is not a number")


def _count_equal(a: Any, b: Any) -> bool:
    a, b = list(a), list(b)
    try:
        return Counter(a) == Counter(b)
    except TypeError:  # unhashable items: match pairwise, bounded
        if len(a) != len(b) or len(a) > 2000:
            return False
        rest = list(b)
        for item in a:
            if item not in rest:
                return False
            rest.remove(item)
        return True


def _almost(a: Any, b: Any, places: int | None, delta: float | None) -> bool:
    if a == b:
        return True
    _number(a, b)
    diff = abs(a - b)
    return diff <= delta if delta is not None else round(diff, 7 if places is None else places) == 0


class Outcomes:
    """The decoded outcomes of one record: per probed expression, its value, truth and class
    names, or (the last one only) what it raised."""

    def __init__(self, encoded: Sequence[Any]) -> None:
        self.values: list[Any] = []
        self.truths: list[Any] = []
        self.kinds: list[Any] = []
        self.raised: tuple[Any, Any] | None = None
        for i, e in enumerate(encoded):
            if not isinstance(e, list) or not e:
                raise ValueError("not an outcome")
            if e[0] == "v" and len(e) == 4:
                self.values.append(decode(e[1]))
                self.truths.append(e[2] if e[2] in (True, False, None) else None)
                self.kinds.append(e[3] if isinstance(e[3], list) else [])
            elif e[0] == "x" and len(e) == 3 and i == len(encoded) - 1:
                self.raised = (e[1], e[2])
            else:
                raise ValueError(f"not an outcome: {str(e)[:60]}")

    def value(self, i: int) -> Any:
        if i >= len(self.values):
            raise _Raised(self.raised)
        return self.values[i]

    def truth(self, i: int) -> bool:
        self.value(i)
        if self.truths[i] is None:
            raise TypeError("a value with no truth")
        return self.truths[i]


class _Raised(Exception):
    """A probed expression raised where the check wanted what it returns."""


def evaluate(tree: tuple, values: Outcomes | Sequence[object]) -> Any:
    """The value of a check's tree over the decoded outcomes of its probed expressions (an
    `Outcomes`, or a plain sequence of values)."""
    if not isinstance(values, Outcomes):
        plain = Outcomes([])
        plain.values = list(values)
        plain.truths = [bool(v) if not isinstance(v, Opaque) else None for v in values]
        plain.kinds = [[type(v).__name__] for v in values]
        values = plain
    kind = tree[0]
    if kind == "lit":
        return tree[1]
    if kind == "slot":
        return values.value(tree[1])
    if kind == "truth":
        return values.truth(tree[1])
    if kind == "ran":
        return values.value(0) is not _UNSET
    if kind == "not":
        return not evaluate(tree[1], values)
    if kind in ("and", "or"):
        parts = [bool(evaluate(t, values)) for t in tree[1]]
        return all(parts) if kind == "and" else any(parts)
    if kind == "cmp":
        left = evaluate(tree[1], values)
        for op, right_tree in zip(tree[2], tree[3], strict=True):
            right = evaluate(right_tree, values)
            if not _COMPARE[op](left, right):
                return False
            left = right
        return True
    if kind in ("bin", "neg", "call"):
        return _arithmetic(tree, values)
    if kind == "isinstance":
        values.value(tree[1])
        names = values.kinds[tree[1]]
        found = isinstance(names, list) and any(w in names for w in tree[2])
        return found != tree[3]
    if kind == "almost":
        a, b = evaluate(tree[1], values), evaluate(tree[2], values)
        return _almost(a, b, tree[3], tree[4]) != tree[5]
    if kind == "assertCountEqual":
        return _count_equal(evaluate(tree[1], values), evaluate(tree[2], values))
    if kind in ("assertRegex", "assertNotRegex"):
        text, pattern = evaluate(tree[1], values), evaluate(tree[2], values)
        found = isinstance(text, str) and search(pattern, text)
        return found == (kind == "assertRegex")
    if kind == "raised":
        if values.raised is None:
            return False
        names, message = values.raised
        if not isinstance(names, list) or not any(w in names for w in tree[1]):
            return False
        return tree[2] is None or (isinstance(message, str) and search(tree[2], message))
    if kind == "fail":
        return False
    raise ValueError(f"unknown check {kind!r}")


def _arithmetic(tree: tuple, values: Sequence[Any]) -> Any:
    if tree[0] == "neg":
        value = evaluate(tree[1], values)
        _number(value)
        return -value
    if tree[0] == "bin":
        a, b = evaluate(tree[2], values), evaluate(tree[3], values)
        if tree[1] in ("+", "*") and not (isinstance(a, Number) and isinstance(b, Number)):
            return fold(tree[1], a, b)  # a probed string or list with a literal one, bounded
        _number(a, b)
        return _BINOPS[tree[1]](a, b)
    args = [evaluate(t, values) for t in tree[2]]
    kwargs = {k: evaluate(t, values) for k, t in tree[3]}
    _number(*args, *(v for k, v in kwargs.items()))
    return _CALLS[tree[1]](*args, **kwargs)


def fired(records: object) -> dict[int, int]:
    """How many times each check fired in a run's records (check id -> count)."""
    counts: dict[int, int] = {}
    for record in records if isinstance(records, list) else []:
        if isinstance(record, list) and record and type(record[0]) is int:
            counts[record[0]] = counts.get(record[0], 0) + 1
    return counts


def judge_test(
    split: SplitTests,
    functions: Sequence[str],
    end: object,
    records: object,
    expected: Mapping[int, int] | None = None,
) -> tuple[str, bool]:
    """(outcome, forged) of one test from what its probe reported: `end` is how its body ended
    inside ("ok", "error: ...", "failed: ...", "skipped"), `records` its checks' outcomes in
    the order they ran. The outcome is "passed", "failed: ..." or "error: ...". `forged`: a
    record the probe never writes (an unknown check, more outcomes than the check probes), so
    the code under test wrote it.

    `expected`: how many times each check fired when the task's reference solution ran this
    test (`fired`): each must fire exactly as often, wherever it stands (a loop, a branch, a
    helper, `try`, `with`, an inherited method). Without it (a task with no reference), each
    `must_run` check of `functions` (the test's method, and "" for the module's own top level)
    must have run at least once."""
    if not isinstance(records, list) or not isinstance(end, str):
        return "error: malformed report", True
    for record in records:
        ok_shape = isinstance(record, list) and len(record) == 2 and type(record[0]) is int
        check = split.checks.get(record[0]) if ok_shape else None
        outcomes = record[1] if check is not None else None
        if (
            check is None
            or not isinstance(outcomes, list)
            or len(outcomes) > check.slots
            or (len(outcomes) < check.slots and not _ends_raised(outcomes))
        ):
            return f"error: a record no assertion writes: {str(record)[:80]}", True
        try:
            decoded = Outcomes(outcomes)
        except (ValueError, TypeError, RecursionError):
            return f"error: a record no assertion writes: {str(record)[:80]}", True
        try:
            passed = bool(evaluate(check.tree, decoded))
        except _Raised:
            names = decoded.raised[0] if decoded.raised else None
            name = str(names[0])[:80] if isinstance(names, list) and names else "an exception"
            return f"failed: the expression at line {check.line} raised {name}", False
        except RegexOverrun as exc:
            return f"failed: the assertion at line {check.line}: {exc}", False
        except Exception:  # a value of the wrong type, unreadable, past a limit: it fails
            passed = False
        if not passed:
            return f"failed: the assertion at line {check.line}", False
    if end != "ok":
        known = end.startswith(("error", "failed", "skipped"))
        return (end if known else f"error: {end}")[:400], False
    counts = fired(records)
    if expected is not None:
        for check_id in sorted(set(expected) | set(counts)):
            want, got = expected.get(check_id, 0), counts.get(check_id, 0)
            if want != got:
                line = split.checks[check_id].line
                ran = "never ran" if got == 0 else f"ran {got} times"
                return (
                    f"failed: the check at line {line} {ran}, "
                    f"{want} times with the reference solution"
                ), False
        return "passed", False
    for check in split.checks.values():
        if check.function in functions and check.must_run and check.id not in counts:
            return f"failed: the assertion at line {check.line} never ran", False
    return "passed", False


def _ends_raised(outcomes: list) -> bool:
    return bool(outcomes) and isinstance(outcomes[-1], list) and outcomes[-1][:1] == ["x"]

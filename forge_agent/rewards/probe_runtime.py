"""The recorder a split test program calls beside the code under test (shipped as source).

A split test program (`forge_agent.rewards.probes`) calls
`__probe__.check(ID, lambda: <expr>, ...)` where its assertion (or any other expression
statement) stood: the recorder calls each expression, encodes what it returned or raised as
tagged JSON and keeps it for the runner to report. It compares nothing and holds no expected value:
the checks live outside, in the process that reads the report. A value the encoding cannot
carry (an object, past the size budget) is reported as what it is, and equals no expected
value. Code under test can replace this recorder; what it forges is checked against values it
never saw.

Standard library only: it runs under `python3 -I` in a grading sandbox.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64
MAX_NODES = 200_000  # per run: a value past it is reported as ["big"]
MAX_TEXT = 1 << 20  # characters of one str or bytes value


class Budget(Exception):
    """A value past the encoding's size budget."""


class Probe:
    """Records, for each check, what each of its probed expressions did, for the runner to
    report (`take`). Every probe has one call shape, `check(ID, lambda: <expr>, ...)`, whether
    the host wants a value, a truth, a class or an exception of it: each expression is called
    here and its *outcome* recorded (what it returned, with its truth and class names, or what
    it raised), so nothing in the program says which the host wants."""

    def __init__(self) -> None:
        self.records: list[list[Any]] = []
        self.nodes = 0

    def check(self, check_id: int, *thunks: Any) -> Outcome:
        """Call each probed expression in turn (stopping at one that raises, as Python would)
        and record their outcomes. Returns the outcome of the last (its `exception`, as
        unittest's `assertRaises` context gives it)."""
        outcomes, last = [], Outcome()
        for thunk in thunks:
            last = Outcome()
            try:
                value = thunk()
            except (Exception, SystemExit) as exc:  # not the runner's own timeout signal
                last.exception = exc
                try:
                    message = str(exc)[:2000]
                except Exception:
                    message = ""
                outcomes.append(["x", self.kind(exc), message])
                break
            outcomes.append(["v", self.encode(value), self.truth(value), self.kind(value)])
        self.records.append([check_id, outcomes])
        return last

    @staticmethod
    def truth(value: object) -> Any:
        """The truth of a value, computed where it lives (objects define their own); None when
        it has none (it raises)."""
        try:
            return bool(value)
        except Exception:
            return None

    @staticmethod
    def kind(value: object) -> list[str]:
        """The class names of a value's type and its bases (for isinstance and raises)."""
        try:
            return [str(c.__name__) for c in type(value).__mro__][:64]
        except Exception:
            return []

    def take(self) -> list[list[Any]]:
        records, self.records = self.records, []
        return records

    def encode(self, value: object, depth: int = 0) -> list[Any]:
        try:
            return self._encode(value, depth)
        except (Budget, RecursionError):
            return ["big"]

    def _encode(self, v: Any, depth: int) -> list[Any]:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            raise Budget
        if v is None:
            return ["n"]
        if isinstance(v, bool):
            return ["b", v is True]
        if isinstance(v, int):
            return ["i", int.__repr__(v)]
        if isinstance(v, float):
            return ["f", float.__repr__(v)]
        if isinstance(v, complex):
            return ["c", float.__repr__(v.real), float.__repr__(v.imag)]
        if isinstance(v, (str, bytes, bytearray)):
            if len(v) > MAX_TEXT:
                raise Budget
            return ["s", str.__str__(v)] if isinstance(v, str) else ["y", bytes(v).hex()]
        for kind, tag in ((list, "l"), (tuple, "t"), (frozenset, "fset"), (set, "set")):
            if isinstance(v, kind):
                return [tag, [self._encode(x, depth + 1) for x in kind.__iter__(v)]]
        if isinstance(v, dict):
            items = dict.items(v)
            return [
                "d",
                [[self._encode(k, depth + 1), self._encode(x, depth + 1)] for k, x in items],
            ]
        return ["o", str(type(v).__qualname__)]


class Outcome:
    """What `Probe.check` returns: `exception` is what its last probed expression raised."""

    def __init__(self) -> None:
        self.exception: BaseException | None = None

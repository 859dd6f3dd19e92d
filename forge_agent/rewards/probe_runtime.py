"""The recorder a split test program calls beside the code under test (shipped as source).

A split test program (`forge_agent.rewards.probes`) calls `__probe__.check(ID, v0, v1, ...)`
where its assertion stood: the recorder encodes the values the code produced as tagged JSON
and keeps them for the runner to report. It compares nothing and holds no expected value:
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
    """Records the values of each check, for the runner to report (`take`)."""

    def __init__(self) -> None:
        self.records: list[list[Any]] = []
        self.nodes = 0

    def check(self, check_id: int, *values: Any) -> None:
        """The values an assertion's probed expressions produced."""
        self.records.append([check_id, [self.encode(v) for v in values]])

    def truth(self, value: Any) -> bool:
        """The truth of a value, computed where it lives (objects define their own)."""
        return bool(value)

    def kind(self, value: Any) -> list[str]:
        """The class names of a value's type and its bases (for isinstance checks)."""
        return [str(c.__name__) for c in type(value).__mro__]

    def raises(self, check_id: int) -> Raises:
        """A context manager that records what its block raised (and swallows it)."""
        return Raises(self, check_id)

    def raises_call(self, check_id: int, fn: Any, *args: Any, **kwargs: Any) -> None:
        with Raises(self, check_id):
            fn(*args, **kwargs)

    def take(self) -> list[list[Any]]:
        records, self.records = self.records, []
        return records

    def encode(self, value: Any, depth: int = 0) -> list[Any]:
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


class Raises:
    """`with probe.raises(ID) as cm:` records (class names, message) of what the block raised,
    or (None, None); `cm.exception` is the exception, as unittest's assertRaises gives it."""

    def __init__(self, probe: Probe, check_id: int) -> None:
        self.probe, self.check_id, self.exception = probe, check_id, None

    def __enter__(self) -> Raises:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if exc is None:
            self.probe.check(self.check_id, None, None)
            return False
        if not isinstance(exc, (Exception, SystemExit)):
            return False  # KeyboardInterrupt, the runner's own timeout signal: not the test's
        self.exception = exc
        try:
            message = str(exc)[:2000]
        except Exception:
            message = ""
        self.probe.check(self.check_id, self.probe.kind(exc), message)
        return True

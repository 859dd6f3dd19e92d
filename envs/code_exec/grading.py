"""Hidden-test grading for code_exec, in a fresh sandbox the episode's code never touched.

Only the solution's source and the test *inputs* enter the sandbox; the expected values stay in
this process, and return values (not stdout) are compared here. So a solution cannot edit the
tests, pass by printing the expected output, or fake results: faking needs the expected values.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GradeResult", "extract_code", "grade"]

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)```", re.DOTALL)

HARNESS = r"""
import copy, json, os, signal, sys
NONCE = {nonce!r}
ENTRY = {entry!r}
PER_TEST_S = {per_test_s!r}
out = os.fdopen(os.dup(1), "w")
sys.stdout = open(os.devnull, "w")  # the solution's prints go nowhere
with open("inputs.json") as f:
    inputs = json.load(f)
os.remove("inputs.json")

def report(record):
    out.write(NONCE + json.dumps(record) + "\n")
    out.flush()

def on_alarm(signum, frame):
    raise TimeoutError(f"test took longer than {{PER_TEST_S}} s")

signal.signal(signal.SIGALRM, on_alarm)
try:
    signal.alarm(PER_TEST_S)
    import solution
    signal.alarm(0)
    fn = getattr(solution, ENTRY)
except BaseException as exc:
    report({{"load_error": f"{{type(exc).__name__}}: {{exc}}"[:300]}})
    os._exit(0)
for i, args in enumerate(inputs):
    try:
        signal.alarm(PER_TEST_S)
        value = fn(*copy.deepcopy(args))
        signal.alarm(0)
        report({{"i": i, "value": json.loads(json.dumps(value))}})
    except BaseException as exc:
        signal.alarm(0)
        report({{"i": i, "error": f"{{type(exc).__name__}}: {{exc}}"[:300]}})
os._exit(0)
"""


@dataclass
class GradeResult:
    """How a solution did on the hidden tests."""

    passed: int
    total: int
    error: str | None = None  # the solution did not load, or the run failed as a whole
    failures: list[str] = field(default_factory=list)  # one line per failed test

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def extract_code(text: str, entry_point: str | None = None) -> str | None:
    """The last fenced code block of `text` (```python ... ```), or None.

    Without a fence, text that defines `entry_point` is taken as the code itself.
    """
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("", "python", "py")]
    if blocks:
        return blocks[-1]
    if entry_point and re.search(rf"^\s*def {re.escape(entry_point)}\s*\(", text, re.MULTILINE):
        return text
    return None


def grade(
    code: str,
    entry_point: str,
    tests: list[dict[str, Any]],
    sandbox: Any,
    limits: Any = None,
    per_test_s: int = 2,
) -> GradeResult:
    """Run `tests` ({"args": [...], "expected": value}) against `code` in a fresh `sandbox` run.

    `sandbox` is a `forge_agent.sandbox.Sandbox` (its `run` starts and tears down a sandbox).
    """
    nonce = f"@@{secrets.token_hex(8)}@@"
    harness = HARNESS.format(nonce=nonce, entry=entry_point, per_test_s=per_test_s)
    inputs = json.dumps([t["args"] for t in tests])
    result = sandbox.run(
        code=harness, files={"solution.py": code, "inputs.json": inputs}, limits=limits
    )
    records: dict[int, dict[str, Any]] = {}
    for line in result.stdout.splitlines():
        if not line.startswith(nonce):
            continue
        record = json.loads(line[len(nonce) :])
        if "load_error" in record:
            return GradeResult(0, len(tests), error=record["load_error"])
        records[record["i"]] = record
    passed, failures = 0, []
    for i, test in enumerate(tests):
        record = records.get(i)
        if record is None:
            failures.append(f"test {i}: no result ({result.describe()})")
        elif "error" in record:
            failures.append(f"test {i}: raised {record['error']}")
        elif _same(record["value"], test["expected"]):
            passed += 1
        else:
            failures.append(f"test {i}: wrong value")
    error = None if records else f"the tests did not run: {result.describe()}"
    return GradeResult(passed, len(tests), error=error, failures=failures)


def _same(got: Any, expected: Any) -> bool:
    if isinstance(expected, float) or isinstance(got, float):
        if isinstance(got, bool) or isinstance(expected, bool):
            return False
        if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
            return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
        return False
    if isinstance(expected, list) and isinstance(got, list):
        pairs = zip(got, expected, strict=False)
        return len(got) == len(expected) and all(_same(g, e) for g, e in pairs)
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(_same(got[k], expected[k]) for k in got)
    return type(got) is type(expected) and got == expected

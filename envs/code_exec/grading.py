"""Hidden-test grading for code_exec, in a fresh sandbox the episode's code never touched.

Two kinds of tests:

- `tests` (``[{"args": [...], "expected": value}]``): only the solution's source and the test
  *inputs* enter the sandbox; the expected values stay in this process, and return values (not
  stdout) are compared here. So a solution cannot edit the tests, pass by printing the expected
  output, or fake results: faking needs the expected values.
- `test_code` (assertion code: HumanEval's ``check(candidate)``, MBPP's ``assert`` lines): the
  assertions run in a process that never runs solution code (the *checker*); the solution is
  imported in a forked *runner* process, and every call the assertions make to the candidate
  (or to any other function the solution module defines, e.g. HumanEval's ``poly``) crosses a
  socket as plain data (None, bool, int, float, str, bytes, list, tuple, dict, set). So a
  return value cannot fake equality (an object whose ``__eq__`` is always true arrives as plain
  data, or not at all), and the solution cannot reach the verdict: the checker is undumpable,
  and the secret that marks its record reaches it on a file read and deleted before the fork
  (the runner's copy is zeroed). The test code (its expected values) is read only after the
  fork, from a descriptor the runner closes before it imports the solution: before, the
  runner held it in memory, and a solution could read its own expected answers.

Every record the run prints is validated: a malformed, duplicated or unexpected record, from
a solution that found the output channel, makes the solution fail (reward 0); it is never an
infrastructure error.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from forge_agent.rewards.probe_verdicts import fired, judge_test
from forge_agent.rewards.probes import probe_runtime_source, split_tests

__all__ = ["GradeResult", "extract_code", "grade", "task_helpers"]

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


ASSERT_HARNESS = r"""
import builtins, importlib.util, json, os, signal, sys
ENTRY = __ENTRY__
BUDGET_S = __BUDGET_S__
BUILTINS = dict(vars(builtins))  # before any code of the solution's: the interpreter's own
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1)
os.dup2(null, 2)
with open("checks.py") as f:
    PROGRAM = f.read()
os.remove("checks.py")
HELPERS = None
if os.path.exists("task_helpers.py"):
    with open("task_helpers.py") as f:
        HELPERS = f.read()
    os.remove("task_helpers.py")
spec = importlib.util.spec_from_file_location("probe_runtime", "probe_runtime.py")
runtime = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runtime)
probe = runtime.Probe()


class OutOfTime(BaseException):  # not an Exception: no probe or assertRaises block swallows it
    pass


def on_alarm(signum, frame):
    raise OutOfTime("the tests took longer than %d s" % BUDGET_S)


signal.signal(signal.SIGALRM, on_alarm)
signal.alarm(BUDGET_S)
end = "ok"
try:
    task = {"__builtins__": dict(BUILTINS), "__name__": "task"}
    if HELPERS is not None:  # the functions the task defines for its checks (HumanEval's poly)
        exec(compile(HELPERS, "<task>", "exec"), task)
    sys.path.insert(0, "")
    import solution
    candidate = getattr(solution, ENTRY, None)
    if not callable(candidate):
        raise NameError("the solution defines no function %r" % ENTRY)
    if HELPERS is None:  # a task without a reference: the solution's names, no builtin shadowed
        namespace = {k: v for k, v in vars(solution).items()
                     if not k.startswith("__") and k not in BUILTINS}
    else:
        namespace = {k: v for k, v in task.items() if not k.startswith("__")}
    task[ENTRY] = candidate
    namespace.update(__builtins__=dict(BUILTINS), __name__="__check__", __probe__=probe)
    namespace[ENTRY] = candidate
    exec(compile(PROGRAM, "<tests>", "exec"), namespace)
    if callable(namespace.get("check")):
        namespace["check"](candidate)
except BaseException as exc:
    end = ("error: %s: %s" % (type(exc).__name__, exc))[:300]
signal.alarm(0)
out.write(json.dumps({"end": end, "records": probe.take()}) + "\n")
out.flush()
os._exit(0)
"""
"""The solution's process: it runs the probe program (the assertion code with every expected
value taken out, `forge_agent.rewards.probes`) against the solution and reports what the
solution's functions produced; it holds no expected value and decides nothing."""


@dataclass
class GradeResult:
    """How a solution did on the hidden tests."""

    passed: int
    total: int
    error: str | None = None  # the solution did not load, or the run failed as a whole
    failures: list[str] = field(default_factory=list)  # one line per failed test
    exposed: int = 0  # assertions that compared in the solution's process (no literal to hold)
    fired: dict[int, int] | None = None  # how many times each check fired (assertion tests)

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
    *,
    test_code: str | None = None,
    helpers: str | None = None,
    expected: dict[int, int] | None = None,
) -> GradeResult:
    """Grade `code` in one `sandbox` run: against `tests` ({"args": [...], "expected": value})
    or, when given, against the assertion code `test_code` (then the result is 1/1 when every
    assertion passes, else 0/1; ``check(<entry_point>)`` is called when it defines ``check``).

    `sandbox` is a `forge_agent.sandbox.Sandbox` (its `run` starts and tears down a sandbox);
    a session works too (its workspace then carries over between gradings). Never raises for
    anything the solution does; `SandboxError` when the sandbox itself fails.

    Assertion tests: `helpers` is the task's own source of the functions its checks call
    (`task_helpers`), bound from the task rather than the solution; `expected` is how many
    times each check fired with the reference solution (`GradeResult.fired` of its grading):
    the solution must fire each as often (without it, the checks of the test's own body must
    run).
    """
    if test_code is not None:
        return _grade_assertions(
            code, entry_point, test_code, sandbox, limits, per_test_s, helpers, expected
        )
    nonce = f"@@{secrets.token_hex(8)}@@"
    harness = HARNESS.format(nonce=nonce, entry=entry_point, per_test_s=per_test_s)
    inputs = json.dumps([t["args"] for t in tests])
    result = sandbox.run(
        code=harness, files={"solution.py": code, "inputs.json": inputs}, limits=limits
    )
    try:
        records, load_error = _records(result.stdout, nonce, len(tests))
    except ValueError as exc:
        return GradeResult(0, len(tests), failures=[f"forged or malformed grading record: {exc}"])
    if load_error is not None:
        return GradeResult(0, len(tests), error=load_error)
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


def _records(stdout: str, nonce: str, total: int) -> tuple[dict[int, dict[str, Any]], str | None]:
    """The harness's records, each checked; raises ValueError for any record it never writes."""
    records: dict[int, dict[str, Any]] = {}
    load_error = None
    for line in stdout.splitlines():
        if not line.startswith(nonce):
            continue
        try:
            record = json.loads(line[len(nonce) :])
        except (ValueError, RecursionError):
            raise ValueError(f"not JSON: {line[len(nonce) : len(nonce) + 80]!r}") from None
        if not isinstance(record, dict):
            raise ValueError(f"not an object: {type(record).__name__}")
        keys = set(record)
        if keys == {"load_error"} and isinstance(record["load_error"], str):
            if load_error is not None or records:
                raise ValueError("a load error after other records")
            load_error = record["load_error"]
            continue
        if keys not in ({"i", "value"}, {"i", "error"}):
            raise ValueError(f"unexpected keys {sorted(keys)[:5]}")
        i = record["i"]
        if type(i) is not int or not 0 <= i < total:
            raise ValueError(f"test index {i!r} is not one of 0..{total - 1}")
        if "error" in record and not isinstance(record["error"], str):
            raise ValueError("an error that is not text")
        if i in records or load_error is not None:
            raise ValueError(f"a second record for test {i}")
        records[i] = record
    return records, load_error


def _grade_assertions(
    code: str,
    entry_point: str,
    test_code: str,
    sandbox: Any,
    limits: Any,
    per_test_s: int,
    helpers: str | None = None,
    expected: dict[int, int] | None = None,
) -> GradeResult:
    """The assertions split (probes in the sandbox, checks here) and judged here."""
    try:
        split = split_tests(test_code)
    except SyntaxError as exc:
        raise ValueError(f"the test code does not parse: {exc}") from exc
    budget_s = max(1, min(per_test_s * max(len(split.checks), 1), 60))
    harness = ASSERT_HARNESS.replace("__ENTRY__", repr(entry_point))
    harness = harness.replace("__BUDGET_S__", repr(int(budget_s)))
    files = {"solution.py": code, "checks.py": split.program}
    files["probe_runtime.py"] = probe_runtime_source()
    if helpers is not None:
        files["task_helpers.py"] = helpers
    result = sandbox.run(code=harness, files=files, limits=_report_limits(sandbox, limits))
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return GradeResult(0, 1, failures=[f"the tests did not finish: {result.describe()}"])
    try:
        report = json.loads(lines[0]) if len(lines) == 1 else None
    except (ValueError, RecursionError):
        report = None
    if not isinstance(report, dict) or set(report) != {"end", "records"}:
        return GradeResult(0, 1, failures=["forged or malformed grading record"])
    if expected is not None:
        exposed = split.exposed("check", expected)
    else:
        exposed = split.exposed("check") + split.exposed("")
    records = report["records"]
    outcome, forged = judge_test(split, ("", "check"), report["end"], records, expected)
    if forged:
        return GradeResult(0, 1, failures=[f"forged or malformed grading record: {outcome}"])
    if outcome == "passed":
        return GradeResult(1, 1, exposed=exposed, fired=fired(records))
    return GradeResult(0, 1, failures=[outcome[:300]], exposed=exposed)


def _report_limits(sandbox: Any, limits: Any) -> Any:
    """`limits` (a session's own when None) with room for the probe's report."""
    from forge_agent.sandbox import Limits

    base = limits or getattr(sandbox, "limits", None) or Limits()
    return base.with_(output_bytes=max(base.output_bytes, REPORT_BYTES))


REPORT_BYTES = 4 << 20


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


def task_helpers(reference: str | None, entry_point: str, test_code: str) -> str | None:
    """The part of a task's reference source its checks call besides the entry point: the
    top-level functions, classes and assignments the test code names (HumanEval's `poly`,
    `encode_cyclic`), with what they name in turn and the reference's imports. Never the
    entry point's own definition. None without a reference (or one that does not parse)."""
    import ast

    if not reference:
        return None
    try:
        module, tests = ast.parse(reference), ast.parse(test_code)
    except SyntaxError:
        return None
    defined: dict[str, ast.stmt] = {}
    imports: list[ast.stmt] = []
    for node in module.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defined[target.id] = node
    defined.pop(entry_point, None)

    def names(tree: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}

    wanted, todo = set(), list(names(tests) & set(defined))
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend((names(defined[name]) & set(defined)) - wanted)
    kept = [n for n in module.body if n in imports or any(defined.get(w) is n for w in wanted)]
    return ast.unparse(ast.Module(body=kept, type_ignores=[])) + "\n"

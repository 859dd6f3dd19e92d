"""Hidden-test grading of a repository task, in a fresh sandbox after the episode.

The second reward principle (docs/rewards.md): no expected value is within reach of the code
being graded. So the hidden tests never enter the grading sandbox as written. On the host,
each hidden test file is split (`forge_agent.rewards.probes`): its assertions become *probes*
that report what the repository's code produced (`self.assertEqual(parse("1-3,,5,"),
[(1, 3), (5, 5)])` becomes `__probe__.check(7, parse("1-3,,5,"))`), and the expected operands
(`[(1, 3), (5, 5)]`, the polarity of `assertTrue`, the class `assertRaises` wants) stay here,
as checks. What reaches the sandbox: the repository files the episode left (regular files
only; links and anything named like grading's own folder are dropped), then, in a folder with
a per-run random name, the probe programs, the recorder and the runner. The *runner*
(`python3 -I`: no user site, no PYTHON* variables; the workspace appended to `sys.path` after
the standard library) loads each probe program by path and runs the named tests with
`unittest`; it reports, per test, how its body ended and the values each probe recorded, as
tagged JSON on its one output line. The host decodes them as data and decides each test
(`probe_verdicts.judge_test`): every probe's values must satisfy its check, every assertion
in the test's own body must have run, and the body must have ended without an error.

What the code under test can do: replace the recorder, patch `unittest`, print a results
line of its own, exit early. None of it finds an expected value to copy, so a forged report
passes only where it reports what a fixed repository would produce. A report the runner never
writes (a record of no assertion, the wrong number of values) is *tampering*
(`GradeResult.tampered`); a missing, repeated or malformed results line fails the episode
(reward 0), never infra. An assertion with no literal operand (`assertEqual(a, Money(100))`)
compares inside: its test is listed in `GradeResult.exposed` (the shipped tasks have none).

Test ids are `path::Class::method` (pytest's node ids; SWE-bench's FAIL_TO_PASS lists), with
`path` relative to the task's tests folder (`tests/test_stack.py::StackTest::test_pop`), or
`path::function` for a module-level `test_*` function.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forge_agent.rewards.probe_verdicts import fired, judge_test
from forge_agent.rewards.probes import SplitTests, probe_runtime_source, split_tests
from forge_agent.sandbox import Limits, Sandbox, SandboxSession

__all__ = [
    "HIDDEN_DIR",
    "MAX_WORKSPACE_BYTES",
    "MAX_WORKSPACE_FILES",
    "GradeResult",
    "WorkspaceTooLarge",
    "grade_files",
    "read_workspace",
]

HIDDEN_DIR = "_hidden_tests"
"""A name the workspace may not use: the episode's files named `_grading*` or `_hidden_tests*`
are dropped before grading (and never read back)."""

MAX_WORKSPACE_FILES = 2_000
MAX_WORKSPACE_BYTES = 8 << 20


class WorkspaceTooLarge(Exception):
    """The episode left more files or bytes than grading reads back."""


RUNNER = r"""
import importlib.util, io, json, os, sys, unittest
G = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(G, "plan.json")) as f:
    PLAN = json.load(f)
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1)
os.dup2(null, 2)
sys.stdout = sys.stderr = io.StringIO()
def load(name, path, probe=None):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if probe is not None:
        module.__probe__ = probe
    spec.loader.exec_module(module)
    return module
runtime = load("probe_runtime", os.path.join(G, "probe_runtime.py"))
sys.path.append(os.getcwd())  # after the standard library
def run(module, test):
    parts = test.split("::")[1:]
    try:
        if len(parts) == 2:
            case = getattr(module, parts[0])(parts[1])
        else:
            case = unittest.FunctionTestCase(getattr(module, parts[0]))
        result = unittest.TestResult()
        case.run(result)
        if result.wasSuccessful() and result.testsRun == 1 and not result.skipped:
            return "ok"
        if result.errors:
            return "error: " + result.errors[0][1][-300:]
        return "failed: " + (result.failures[0][1][-300:] if result.failures else "skipped")
    except BaseException as exc:
        return "error: %s: %s" % (type(exc).__name__, str(exc)[:200])
results = {}
for index, (path, tests) in enumerate(PLAN["tests"]):
    probe = runtime.Probe()
    name = "tests_%d_%s" % (index, os.path.basename(path)[:-3])
    try:
        module = load(name, os.path.join(G, "hidden", path), probe)
        sys.modules[name] = module
    except BaseException as exc:
        for test in tests:
            why = "error: cannot import %s: %s: %s" % (path, type(exc).__name__, str(exc)[:200])
            results[test] = {"end": why, "records": []}
        continue
    imported = probe.take()
    for test in tests:
        end = run(module, test)
        results[test] = {"end": end, "records": imported + probe.take()}
out.write("RESULTS " + json.dumps(results) + "\n")
out.flush()
os._exit(0)
"""
"""The test process: it loads the probe programs (which import the repository's code) and
runs the tests; it reports what the probes recorded and holds no expected value."""


@dataclass
class GradeResult:
    """Per-test outcomes of one grading run and the verdict."""

    results: dict[str, str] = field(default_factory=dict)  # test id -> "passed" | "failed: ..."
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    error: str | None = None  # the run produced no valid verdict
    tampered: str | None = None  # a report the runner never writes: the code under test wrote it
    exposed: list[str] = field(default_factory=list)  # tests that compare inside the sandbox
    fired: dict[str, dict[int, int]] = field(default_factory=dict)  # passed test -> its checks

    def passed(self, tests: Sequence[str]) -> int:
        return sum(self.results.get(t) == "passed" for t in tests)

    @property
    def resolved(self) -> bool:
        """Every fail-to-pass and pass-to-pass test passed (SWE-bench's "resolved")."""
        wanted = [*self.fail_to_pass, *self.pass_to_pass]
        return self.error is None and bool(wanted) and self.passed(wanted) == len(wanted)

    def failing(self) -> list[str]:
        """The wanted tests that did not pass, with why."""
        wanted = [*self.fail_to_pass, *self.pass_to_pass]
        return [
            f"{t}: {self.results.get(t, 'not run')}" for t in wanted if t not in self.passed_ids
        ]

    @property
    def passed_ids(self) -> set[str]:
        return {t for t, r in self.results.items() if r == "passed"}


def read_workspace(session: SandboxSession) -> dict[str, str]:
    """The regular files of an episode's workspace (links and special files are dropped).

    Raises:
        WorkspaceTooLarge: past `MAX_WORKSPACE_FILES` files or `MAX_WORKSPACE_BYTES` bytes.
    """
    listing = session.run(
        argv=["find", ".", "-type", "f", "-size", f"-{MAX_WORKSPACE_BYTES}c", "-print0"],
        limits=session.limits.with_(output_bytes=1 << 20),
    )
    names = [n.removeprefix("./") for n in listing.stdout.split("\0") if n]
    if listing.truncated or len(names) > MAX_WORKSPACE_FILES:
        raise WorkspaceTooLarge(f"more than {MAX_WORKSPACE_FILES} files")
    files, total = {}, 0
    for name in sorted(names):
        if _reserved(name) or "/__pycache__/" in f"/{name}":
            continue
        try:
            text = session.read_file(name)
        except (OSError, ValueError):
            continue  # replaced by a link or removed since the listing
        total += len(text.encode("utf-8"))
        if total > MAX_WORKSPACE_BYTES:
            raise WorkspaceTooLarge(f"more than {MAX_WORKSPACE_BYTES} bytes")
        files[name] = text
    return files


def grade_files(
    files: Mapping[str, str],
    hidden_tests: Mapping[str, str],
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    backend: Sandbox,
    limits: Limits,
    expected: Mapping[str, Mapping[int, int]] | None = None,
) -> GradeResult:
    """Run the hidden tests over the repository `files` in a fresh sandbox of `backend`.

    `hidden_tests` maps paths relative to the task's tests folder to their text. With empty
    `fail_to_pass` and `pass_to_pass` every `test*` of every hidden file is wanted (found by
    `discover_tests`) and counted as fail-to-pass. `expected`: per test, how many times each
    of its checks fired on the oracle patch (`GradeResult.fired` of that grading); each test
    must fire its checks as often (without it, the checks of the test's own body must run).
    """
    if not fail_to_pass and not pass_to_pass:
        fail_to_pass = discover_tests(hidden_tests)
    by_file: dict[str, list[str]] = {}
    for test in [*fail_to_pass, *pass_to_pass]:
        by_file.setdefault(test.split("::")[0], []).append(test)
    splits = {
        path: split_tests(hidden_tests[path], path) for path in by_file if path in hidden_tests
    }
    program_ids = {  # the tests by the names their programs give them (numbers)
        test: _program_id(test, splits.get(test.split("::")[0]))
        for test in [*fail_to_pass, *pass_to_pass]
    }
    plan = [(path, [program_ids[t] for t in tests]) for path, tests in by_file.items()]
    folder = f"_grading_{secrets.token_hex(8)}"  # nothing the episode left can be in its way
    payload = {
        **{k: v for k, v in files.items() if not _reserved(k)},
        **{f"{folder}/hidden/{path}": split.program for path, split in splits.items()},
        f"{folder}/probe_runtime.py": probe_runtime_source(),
        f"{folder}/plan.json": json.dumps({"tests": plan}),
        f"{folder}/runner.py": RUNNER,
    }
    result = GradeResult(fail_to_pass=list(fail_to_pass), pass_to_pass=list(pass_to_pass))
    with backend.session(limits) as session:
        for path, text in payload.items():
            session.write_file(path, text)
        run = session.run(
            argv=["python3", "-I", f"{folder}/runner.py"],
            limits=limits.with_(output_bytes=REPORT_BYTES),
        )
    records = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    if len(records) != 1 or run.truncated:
        why = run.describe() if not run.ok else f"{len(records)} results lines"
        result.error = f"the tests did not finish ({why}): {run.stderr[-300:]}"
        return result
    try:
        report = json.loads(records[0][len("RESULTS ") :])
    except (ValueError, RecursionError):
        report = None
    if isinstance(report, dict) and set(report) == set(program_ids.values()):
        report = {test: report[program_id] for test, program_id in program_ids.items()}
    return _judge(result, report, splits, expected)


def _program_id(test: str, split: SplitTests | None) -> str:
    """`test`'s id as its probe program names it (`path::Class::test_3`)."""
    path, *parts = test.split("::")
    renamed = split.renamed.get(".".join(parts)) if split is not None else None
    return "::".join([path, *renamed.split(".")]) if renamed else test


REPORT_BYTES = 8 << 20
"""The most the runner may report (values are size-bounded by the recorder too)."""


def _judge(
    result: GradeResult,
    report: Any,
    splits: Mapping[str, SplitTests],
    expected: Mapping[str, Mapping[int, int]] | None = None,
) -> GradeResult:
    """Each wanted test decided on the host from what its probes reported."""
    wanted = [*result.fail_to_pass, *result.pass_to_pass]
    if not isinstance(report, dict) or set(report) != set(wanted):
        result.error = "the results do not name exactly the wanted tests"
        return result
    for test in wanted:
        path, *parts = test.split("::")
        split = splits.get(path)
        entry = report[test]
        if split is None:
            result.results[test] = f"error: no hidden test file {path}"
            continue
        if not isinstance(entry, dict) or set(entry) != {"end", "records"}:
            result.tampered = f"a malformed report for {test}"
            break
        want = expected.get(test) if expected is not None else None
        function = ".".join(parts)
        outcome, forged = judge_test(split, ("", function), entry["end"], entry["records"], want)
        if forged:
            result.tampered = f"{test}: {outcome}"
            break
        result.results[test] = outcome
        if outcome == "passed":
            result.fired[test] = fired(entry["records"])
        if split.exposed(function, want):
            result.exposed.append(test)
    if result.tampered is not None:
        result.error, result.results = "tampering detected", {}
    return result


def _reserved(path: str) -> bool:
    """Workspace paths grading drops: anything named like its own folders."""
    return path.startswith(("_grading", HIDDEN_DIR))


def discover_tests(hidden_tests: Mapping[str, str]) -> list[str]:
    """`path::Class::test_x` / `path::test_x` ids of the test methods and functions that the
    hidden test files define (read with `ast`, never run on the host)."""
    import ast

    found = []
    for path, text in sorted(hidden_tests.items()):
        if not path.endswith(".py"):
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                found.append(f"{path}::{node.name}")
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                        found.append(f"{path}::{node.name}::{item.name}")
    return found

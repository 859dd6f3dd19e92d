"""Hidden-test grading of a repository task, in a fresh sandbox after the episode.

What reaches the grading sandbox: the repository files the episode left (regular files only,
read back through the sandbox; links are dropped), then the task's hidden test files written
over them under `HIDDEN_DIR`, then the harness. The episode never saw the hidden tests, and
nothing it left can change how they are found or run:

- the harness starts with `python3 -I` (no user site, no PYTHON* variables, neither the
  script's folder nor the working directory on `sys.path`), then appends the workspace to
  `sys.path`, after the standard library: a `unittest.py` or `sitecustomize.py` the model wrote
  shadows nothing;
- it loads each hidden test file by path and runs the named tests with `unittest`; test
  output goes to /dev/null at the file-descriptor level;
- its verdict is one record on a duplicate of the original stdout, marked with a secret the
  harness reads from a file and deletes before any repository code is imported; a missing,
  malformed or repeated record fails the episode (reward 0), never an infrastructure error.

The code under test runs in the test process, as in SWE-bench and Harbor.

Test ids are `path::Class::method` (pytest's node ids; SWE-bench's FAIL_TO_PASS lists), with
`path` relative to the task's tests folder (`tests/test_stack.py::StackTest::test_pop`), or
`path::function` for a module-level `test_*` function.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
"""Where the hidden tests are written in the grading sandbox (files there from the episode
are dropped first)."""

MAX_WORKSPACE_FILES = 2_000
MAX_WORKSPACE_BYTES = 8 << 20


class WorkspaceTooLarge(Exception):
    """The episode left more files or bytes than grading reads back."""


HARNESS = r"""
import importlib.util, io, json, os, sys, unittest
fd = os.open("_grading/secret", os.O_RDONLY)
SECRET = os.read(fd, 128).decode()
os.close(fd)
os.remove("_grading/secret")
with open("_grading/plan.json") as f:
    PLAN = json.load(f)
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1)
os.dup2(null, 2)
sys.stdout = sys.stderr = io.StringIO()
sys.path.append(os.getcwd())  # after the standard library
results = {}
for index, (path, tests) in enumerate(PLAN.items()):
    name = "_hidden_%d_%s" % (index, os.path.basename(path)[:-3])
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(PLAN_DIR, path))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except BaseException as exc:
        for test in tests:
            results[test] = "error: cannot import %s: %s: %s" % (path, type(exc).__name__, exc)
        continue
    for test in tests:
        parts = test.split("::")[1:]
        try:
            if len(parts) == 2:
                case = getattr(module, parts[0])(parts[1])
            else:
                case = unittest.FunctionTestCase(getattr(module, parts[0]))
            result = unittest.TestResult()
            case.run(result)
            if result.wasSuccessful() and result.testsRun == 1 and not result.skipped:
                results[test] = "passed"
            else:
                problems = result.failures + result.errors
                results[test] = "failed: " + (problems[0][1][-300:] if problems else "skipped")
        except BaseException as exc:
            results[test] = "error: %s: %s" % (type(exc).__name__, str(exc)[:200])
out.write(SECRET + json.dumps(results) + "\n")
out.flush()
os._exit(0)
"""


@dataclass
class GradeResult:
    """Per-test outcomes of one grading run and the verdict."""

    results: dict[str, str] = field(default_factory=dict)  # test id -> "passed" | "failed: ..."
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    error: str | None = None  # the run produced no valid verdict

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
        if name.startswith(("_grading/", HIDDEN_DIR + "/")) or "/__pycache__/" in f"/{name}":
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
) -> GradeResult:
    """Run the hidden tests over the repository `files` in a fresh sandbox of `backend`.

    `hidden_tests` maps paths relative to the task's tests folder to their text. With empty
    `fail_to_pass` and `pass_to_pass` every `test*` of every hidden file is wanted (found by
    `discover_tests`) and counted as fail-to-pass.
    """
    if not fail_to_pass and not pass_to_pass:
        fail_to_pass = discover_tests(hidden_tests)
    plan: dict[str, list[str]] = {}
    for test in [*fail_to_pass, *pass_to_pass]:
        plan.setdefault(test.split("::")[0], []).append(test)
    secret = secrets.token_hex(24)
    payload = {
        **{k: v for k, v in files.items() if not k.startswith(HIDDEN_DIR + "/")},
        **{f"{HIDDEN_DIR}/{path}": text for path, text in hidden_tests.items()},
        "_grading/secret": secret,
        "_grading/plan.json": json.dumps(plan),
    }
    code = f"PLAN_DIR = {HIDDEN_DIR!r}\n" + HARNESS
    result = GradeResult(fail_to_pass=list(fail_to_pass), pass_to_pass=list(pass_to_pass))
    with backend.session(limits) as session:
        for path, text in payload.items():
            session.write_file(path, text)
        session.write_file("_grading/harness.py", code)
        run = session.run(argv=["python3", "-I", "_grading/harness.py"], limits=limits)
    records = [line for line in run.stdout.splitlines() if line.startswith(secret)]
    if len(records) != 1:
        why = run.describe() if not run.ok else f"{len(records)} verdict records"
        result.error = f"no verdict ({why}): {run.stderr[-300:]}"
        return result
    try:
        results = json.loads(records[0][len(secret) :])
    except json.JSONDecodeError as exc:
        result.error = f"malformed verdict: {exc}"
        return result
    if not isinstance(results, dict) or set(results) != set(fail_to_pass) | set(pass_to_pass):
        result.error = "the verdict does not name exactly the wanted tests"
        return result
    result.results = {str(k): str(v) for k, v in results.items()}
    return result


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

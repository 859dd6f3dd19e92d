"""Hidden-test grading of a repository task, in a fresh sandbox after the episode.

What reaches the grading sandbox: the repository files the episode left (regular files only,
read back through the sandbox; links and anything named like grading's own folders are
dropped), then, in a folder with a per-run random name, the task's hidden test files, a canary
test file and the two grading programs. The episode never saw the hidden tests, and nothing it
left can change how they are found or run:

- the *supervisor* (`python3 -I`) never imports repository code. It reads the secret that
  marks the verdict and the canaries' expected outcomes from files it deletes, makes itself
  undumpable (same-uid code cannot open its memory, descriptors or environment), starts the
  runner with a pipe for its results, and writes the one verdict on its stdout;
- the *runner* (`python3 -I`: no user site, no PYTHON* variables; the workspace appended to
  `sys.path` after the standard library, so a planted `unittest.py` or `sitecustomize.py`
  shadows nothing) loads the canary file (then deletes it), loads each hidden test file by
  path and runs the named tests with `unittest`, output to /dev/null, then runs the canaries;
- the canaries are two tests with per-run random names: one must fail, one must error, each
  naming a per-run nonce. A patched `unittest`, a forged results line or a runner that exits
  early cannot make the real tests pass without the canaries passing too or the record going
  missing: a canary that reports anything else is *tampering* (`GradeResult.tampered`); a
  missing, repeated or malformed record fails the episode (reward 0), never infra.

What in-process grading still risks (the code under test shares the runner, as in SWE-bench
and Harbor): code written against this harness can find the canaries in the runner's memory
and forge a full, consistent results line. docs/rewards.md says what would catch it.

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
"""A name the workspace may not use: the episode's files named `_grading*` or `_hidden_tests*`
are dropped before grading (and never read back)."""

MAX_WORKSPACE_FILES = 2_000
MAX_WORKSPACE_BYTES = 8 << 20


class WorkspaceTooLarge(Exception):
    """The episode left more files or bytes than grading reads back."""


SUPERVISOR = r"""
import ctypes, json, os, subprocess, sys
G = os.path.dirname(os.path.abspath(__file__))
try:  # undumpable: same-uid code cannot open its /proc/<pid>/mem, fd or environ
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
except Exception:
    pass
def take(name):
    with open(os.path.join(G, name)) as f:
        text = f.read()
    os.remove(os.path.join(G, name))
    return text
SECRET, CANARIES = take("secret"), json.loads(take("canaries.json"))
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1)
os.dup2(null, 2)
verdict = {"results": {}, "error": None, "tampered": None}
try:
    run = subprocess.run(
        [sys.executable, "-I", os.path.join(G, "runner.py")], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=RUNNER_WALL_S,
    )
    records = [l for l in run.stdout.decode("utf-8", "replace").splitlines()
               if l.startswith("RESULTS ")]
    if run.returncode != 0 or len(records) != 1:
        verdict["error"] = "the tests did not finish (exit %s, %d records)" % (
            run.returncode, len(records))
    else:
        results = json.loads(records[0][len("RESULTS "):])
        for canary in CANARIES:
            got = str(results.pop(canary["id"], "not run"))
            if not (got.startswith(canary["expect"] + ":") and canary["nonce"] in got):
                verdict["tampered"] = "canary test %s (must end %s) reported %r" % (
                    canary["id"], canary["expect"], got[:120])
        verdict["results"] = results
except subprocess.TimeoutExpired:
    verdict["error"] = "the tests did not finish within %g s" % RUNNER_WALL_S
except Exception as exc:
    verdict["error"] = "malformed results: %s: %s" % (type(exc).__name__, str(exc)[:200])
out.write(SECRET + json.dumps(verdict) + "\n")
out.flush()
os._exit(0)
"""
"""Runs in the grading sandbox and never imports repository code: it holds the secret that
marks the verdict, starts the runner, checks the canaries and writes the verdict."""

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
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
canary_path, canary_tests = PLAN["canary"]
canaries = load("_c", os.path.join(G, canary_path))  # before any repository code runs
os.remove(os.path.join(G, canary_path))
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
            return "passed"
        if result.errors:
            return "error: " + result.errors[0][1][-300:]
        return "failed: " + (result.failures[0][1][-300:] if result.failures else "skipped")
    except BaseException as exc:
        return "error: %s: %s" % (type(exc).__name__, str(exc)[:200])
results = {}
for index, (path, tests) in enumerate(PLAN["tests"]):
    name = "_hidden_%d_%s" % (index, os.path.basename(path)[:-3])
    try:
        module = load(name, os.path.join(G, "hidden", path))
        sys.modules[name] = module
    except BaseException as exc:
        for test in tests:
            results[test] = "error: cannot import %s: %s: %s" % (path, type(exc).__name__, exc)
        continue
    for test in tests:
        results[test] = run(module, test)
for test in canary_tests:  # last: after every import and test of the repository's code
    results[test] = run(canaries, test)
out.write("RESULTS " + json.dumps(results) + "\n")
out.flush()
os._exit(0)
"""
"""The test process: it loads the hidden tests (which import the repository's code) and runs
them, then the canaries; its results reach only the supervisor."""

CANARY = """import unittest


class {cls}(unittest.TestCase):
    def test_{fail}(self):
        self.fail("{fail_nonce}")

    def test_{error}(self):
        raise RuntimeError("{error_nonce}")
"""


def _canaries() -> tuple[str, str, list[dict[str, str]]]:
    """A canary test file with per-run random names (its path, its text) and what each of its
    two tests must report: one must fail, one must error, each naming its nonce. A verdict in
    which one passes means the code under test changed how tests run or are reported."""
    names = {k: secrets.token_hex(6) for k in ("cls", "fail", "error", "file")}
    nonces = {k: secrets.token_hex(12) for k in ("fail_nonce", "error_nonce")}
    cls = "Test" + names["cls"].capitalize()
    path = f"test_{names['file']}.py"
    text = CANARY.format(cls=cls, fail=names["fail"], error=names["error"], **nonces)
    expected = [
        {"id": f"{path}::{cls}::test_{names['fail']}", "expect": "failed",
         "nonce": nonces["fail_nonce"]},
        {"id": f"{path}::{cls}::test_{names['error']}", "expect": "error",
         "nonce": nonces["error_nonce"]},
    ]  # fmt: skip
    return path, text, expected


@dataclass
class GradeResult:
    """Per-test outcomes of one grading run and the verdict."""

    results: dict[str, str] = field(default_factory=dict)  # test id -> "passed" | "failed: ..."
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    error: str | None = None  # the run produced no valid verdict
    tampered: str | None = None  # what a canary test reported when the code under test changed it

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
) -> GradeResult:
    """Run the hidden tests over the repository `files` in a fresh sandbox of `backend`.

    `hidden_tests` maps paths relative to the task's tests folder to their text. With empty
    `fail_to_pass` and `pass_to_pass` every `test*` of every hidden file is wanted (found by
    `discover_tests`) and counted as fail-to-pass.
    """
    if not fail_to_pass and not pass_to_pass:
        fail_to_pass = discover_tests(hidden_tests)
    by_file: dict[str, list[str]] = {}
    for test in [*fail_to_pass, *pass_to_pass]:
        by_file.setdefault(test.split("::")[0], []).append(test)
    canary_path, canary_text, canaries = _canaries()
    plan = {"tests": list(by_file.items()), "canary": [canary_path, [c["id"] for c in canaries]]}
    secret = secrets.token_hex(24)
    folder = f"_grading_{secrets.token_hex(8)}"  # nothing the episode left can be in its way
    runner_wall_s = max(limits.wall_s - 2.0, 1.0)
    payload = {
        **{k: v for k, v in files.items() if not _reserved(k)},
        **{f"{folder}/hidden/{path}": text for path, text in hidden_tests.items()},
        f"{folder}/{canary_path}": canary_text,
        f"{folder}/secret": secret,
        f"{folder}/canaries.json": json.dumps(canaries),
        f"{folder}/plan.json": json.dumps(plan),
        f"{folder}/runner.py": RUNNER,
        f"{folder}/supervisor.py": f"RUNNER_WALL_S = {runner_wall_s!r}\n" + SUPERVISOR,
    }
    result = GradeResult(fail_to_pass=list(fail_to_pass), pass_to_pass=list(pass_to_pass))
    with backend.session(limits) as session:
        for path, text in payload.items():
            session.write_file(path, text)
        run = session.run(argv=["python3", "-I", f"{folder}/supervisor.py"], limits=limits)
    records = [line for line in run.stdout.splitlines() if line.startswith(secret)]
    if len(records) != 1:
        why = run.describe() if not run.ok else f"{len(records)} verdict records"
        result.error = f"no verdict ({why}): {run.stderr[-300:]}"
        return result
    verdict = json.loads(records[0][len(secret) :])  # the supervisor's own: well formed
    result.tampered = verdict["tampered"]
    result.error = verdict["error"] or (verdict["tampered"] and "tampering detected")
    results = verdict["results"]
    if result.error is None and set(results) != set(fail_to_pass) | set(pass_to_pass):
        result.error = "the results do not name exactly the wanted tests"
        return result
    result.results = {str(k): str(v) for k, v in results.items()}
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

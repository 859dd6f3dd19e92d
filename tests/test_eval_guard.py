"""The eval guard of sandboxed judges (`forge_agent.sandbox.eval_guard`): the answers
reasoning-gym's evaluating scorers expect score as they did without it, and expressions that
could run code are refused. Verdicts come through the real judge server."""

from __future__ import annotations

import asyncio

import pytest
import reasoning_gym

from forge_agent.env.adapters.reasoning_gym import scorer
from forge_agent.sandbox.judge import JudgeError, ScorerRef, judge_server
from tests import sandboxed_scorers

# The tasks whose scorers `eval` or `sympy.parse_expr` the answer (or their own answer key).
EVALUATING = [
    "binary_matrix", "bitwise_arithmetic", "countdown", "intermediate_integration", "n_queens",
    "number_sorting", "polynomial_multiplication", "puzzle24", "simple_integration",
    "spiral_matrix", "string_insertion",
]  # fmt: skip


@pytest.mark.parametrize("task", EVALUATING)
def test_the_guard_keeps_the_verdicts_of_evaluating_scorers(task):
    dataset = reasoning_gym.create_dataset(task, seed=0, size=3)
    cases = [(answer, e) for e in dataset for answer in (str(e["answer"]), "0", "[[1, 2], [3]]")]
    in_process = [float(scorer(task, {})(answer, entry)) for answer, entry in cases]
    ref = ScorerRef("forge_agent.env.adapters.reasoning_gym:scorer", (task, {}))

    async def sandboxed() -> list[float]:
        return await asyncio.gather(*(judge_server().score(ref, a, e) for a, e in cases))

    assert asyncio.run(sandboxed()) == in_process


ESCAPES = [
    "__import__('os').getpid()",
    "getattr(1, 'real')",
    "().__class__",
    "'{0.real}'.format(1)",
    "open('/etc/hostname').read()",
    "[c for c in (1).mro()]",
    "(lambda: eval('1'))()",
]


@pytest.mark.parametrize("expression", ESCAPES)
def test_the_guard_refuses_expressions_that_could_run_code(expression):
    with pytest.raises(JudgeError, match="PermissionError"):
        asyncio.run(sandboxed_scorers.evals_the_answer(expression, {"answer": 1}))


def test_the_guard_lets_plain_values_and_arithmetic_through():
    entry = {"answer": [[1, 2], [3, 4]]}
    assert asyncio.run(sandboxed_scorers.evals_the_answer("[[1, 2], [3, 4]]", entry)) == 1.0
    assert (
        asyncio.run(
            sandboxed_scorers.evals_the_answer("sorted([3, 1]) + [2]", {"answer": [1, 3, 2]})
        )
        == 1.0
    )

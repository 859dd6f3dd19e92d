"""The eval guard of sandboxed judges (`forge_agent.rewards.eval_guard`): expressions that
could run code are refused, plain values and arithmetic pass. Verdicts come through the real
judge server. (The answers reasoning-gym's evaluating scorers expect, under the guard:
`tests/test_reasoning_gym_scorers.py`.)"""

from __future__ import annotations

import asyncio

import pytest

from forge_agent.rewards.judge import JudgeError
from tests import sandboxed_scorers

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

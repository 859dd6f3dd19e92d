"""Arithmetic tasks generated from a seed, with a difficulty knob.

Every task is a dict with `task_id`, `prompt`, `answer` (a non-negative integer, as a string)
and `expression` (what to type into the calculator). Prompts are short and regular so a tiny
model can learn them:

- difficulty 1: one operation on two-digit numbers ("What is 37 * 12?");
- difficulty 2: two operations on up to three-digit numbers ("What is 37 * 12 + 5?");
- difficulty 3: three operations with parentheses ("What is (37 + 12) * 5 - 8?").

About a third of the tasks are word problems with the same arithmetic ("A shop has 37 boxes of
12 pens and sells 5 pens. How many pens are left?").
"""

from __future__ import annotations

import random
from typing import Any

from tools.calculator import evaluate

__all__ = ["DIFFICULTIES", "generate_tasks"]

DIFFICULTIES = (1, 2, 3)

_ITEMS = ("apples", "pens", "books", "coins", "stamps", "marbles", "cards", "eggs")
_NAMES = ("Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana")


def generate_tasks(n: int, seed: int = 0, difficulty: int = 1) -> list[dict[str, Any]]:
    """`n` tasks, the same for the same (seed, difficulty)."""
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
    rng = random.Random(f"calculator-{seed}-{difficulty}")
    tasks = []
    for i in range(n):
        expression, prompt = (
            _word_problem(rng, difficulty) if rng.random() < 1 / 3 else (_plain(rng, difficulty))
        )
        value = evaluate(expression)
        assert value.denominator == 1 and value >= 0, expression
        tasks.append(
            {
                "task_id": f"calculator-d{difficulty}-s{seed}-{i}",
                "prompt": prompt,
                "answer": str(value.numerator),
                "expression": expression,
            }
        )
    return tasks


def _plain(rng: random.Random, difficulty: int) -> tuple[str, str]:
    if difficulty == 1:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        op = rng.choice("+-*")
        if op == "-" and b > a:
            a, b = b, a
        expression = f"{a} {op} {b}"
    elif difficulty == 2:
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 999)
        expression = rng.choice(
            (
                f"{a} * {b} + {c}",
                f"{a} * {b} - {min(c, a * b)}",
                f"{c} + {a} * {b}",
                f"{a + b} * {c}",
            )
        )
    else:
        a, b, c = rng.randint(10, 999), rng.randint(10, 999), rng.randint(2, 99)
        d = rng.randint(10, min(999, (a + b) * c))  # keeps every template non-negative
        expression = rng.choice(
            (f"({a} + {b}) * {c} - {d}", f"({a} + {b}) * {c} + {d}", f"{a} * {c} + {b} * {c} - {d}")
        )
    return expression, f"What is {expression}?"


def _word_problem(rng: random.Random, difficulty: int) -> tuple[str, str]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    boxes, per_box = rng.randint(10, 99), rng.randint(10, 99)
    if difficulty == 1:
        return (
            f"{boxes} * {per_box}",
            (
                f"{name} has {boxes} boxes with {per_box} {item} in each box. "
                f"How many {item} does {name} have?"
            ),
        )
    if difficulty == 2:
        extra = rng.randint(10, 999)
        return (
            f"{boxes} * {per_box} + {extra}",
            (
                f"{name} has {boxes} boxes with {per_box} {item} in each box and {extra} more "
                f"{item}. How many {item} does {name} have?"
            ),
        )
    days, used = rng.randint(2, 9), rng.randint(10, boxes * per_box)
    return (
        f"{boxes} * {per_box} * {days} - {used}",
        (
            f"{name} gets {boxes} boxes with {per_box} {item} in each box every day for {days} "
            f"days and gives away {used} {item}. How many {item} are left?"
        ),
    )

"""Task families of the calculator env where copying the prompt is not enough (issue 59).

`CalculatorEnv(family=...)` plays them; each task names its `kind` (a template group, reported
per kind by the evaluator) and its `template`. The held-out split is **by template**: every
fourth template of each kind (a quarter of them) is eval-only, so held-out tasks are phrasings
the policy never saw in the warm start or in RL (and their generator seeds differ too).

- `word_problems`: arithmetic in words; six kinds of computation (`mul_add`, `mul_sub`,
  `add_mul`, `share`, `sub_sub`, `add_add`), eight phrasings each (two held out), whose
  numbers come in different orders and words, so the call is a translation, not a copy; every
  structure but one that a held-out phrasing has (the addend before the product, the shared
  factor first, the total named last) is also some training phrasing's, in other words; the
  one left is `share`'s divisor named before the total ("B friends split a bill of T").
- `dependent`: the numbers are behind tools whose replies must be read: `price(item)` and
  `order(customer)` look up the task's own table. `price` (2 dependent calls: price, then the
  calculator on it), `order` (a chain of 3: the order names the item and how many, the price of
  that item, the calculator), `two_prices` (3 calls: two prices, then one expression of both).
- `program`: program-of-thought on the word problems (the same kinds, phrasings and held-out
  split): the tool is `python`, run in a bubblewrap sandbox (`forge_agent.sandbox`), and the
  call is a short program that names each number of the problem in the words' order, then
  prints the computation over the names (`boxes = 37`, `per_box = 12`, `more = 5`,
  `print(boxes * per_box + more)`); the answer is what it printed.
- `mixed`: `arith` tasks need the calculator; `reply` ("Reply with 417.") and `fact` ("How
  many legs does a spider have?") need no tool, and the right move is to answer. A correct
  answer after a call such a task did not need earns half (`needless_call` in info).

Demonstrations are correct ones only (no guesses): each task carries the calls that solve it
(`calls`), and `demonstration` plays them through the same tools the env offers.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from typing import Any

from envs.calculator.phrasings import PROGRAM_NAMES, WORD, Template
from forge_agent.sandbox import Limits, Sandbox, SandboxSession
from forge_agent.sandbox import make_sandbox as new_sandbox
from forge_agent.types import Message
from tools.calculator import calculator_without_example, evaluate
from tools.python import python_without_example

__all__ = [
    "FAMILIES",
    "Template",
    "demonstration",
    "family_tools",
    "generate_family_tasks",
    "make_sandbox",
    "program",
    "system_prompt",
    "templates",
]

FAMILIES = ("word_problems", "dependent", "mixed", "program")

_NAMES = ("Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun")
_ITEMS = ("apples", "pens", "books", "coins", "stamps", "marbles", "cards", "eggs")
_GOODS = ("pens", "books", "mugs", "lamps", "kites", "hats", "cups", "bells", "maps", "socks")

SYSTEM_PROMPTS = {
    "word_problems": "Solve the word problem. Call the calculator tool with the arithmetic "
    "expression the words describe, then reply with only the final answer as an integer.",
    "dependent": "Answer the question. Prices are only visible through the price tool and "
    "orders only through the order tool; read each reply, compute with the calculator tool, "
    "then reply with only the final answer as an integer.",
    "program": "Solve the word problem. Call the python tool with a short program that names "
    "each number of the problem and prints the answer, then reply with only the final answer "
    "as an integer.",
    "mixed": "Answer the question. Call the calculator tool only for arithmetic; answer any "
    "other question directly. Reply with only the final answer as an integer.",
}

NEEDLESS_CALL_REWARD = 0.5
"""A no-tool task of `mixed` answered right after a tool call earns this (1.0 without)."""


# ------------------------------------------------------------------------- word problems


def _word_fields(kind: str, rng: random.Random) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": rng.choice(_NAMES), "item": rng.choice(_ITEMS)}
    if kind in ("mul_add", "mul_sub"):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        c = rng.randint(10, 999) if kind == "mul_add" else rng.randint(10, min(999, a * b))
        fields.update(a=a, b=b, c=c)
    elif kind == "add_mul":
        fields.update(a=rng.randint(10, 99), b=rng.randint(10, 99), c=rng.randint(3, 29))
    elif kind == "share":
        b = rng.randint(3, 29)
        fields.update(b=b, t=b * rng.randint(11, 99))
    elif kind == "sub_sub":
        fields.update(a=rng.randint(500, 999), b=rng.randint(10, 240), c=rng.randint(10, 240))
    else:  # add_add
        fields.update(a=rng.randint(100, 999), b=rng.randint(10, 999), c=rng.randint(10, 999))
    return fields


def _word_task(template: Template, rng: random.Random) -> dict[str, Any]:
    fields = _word_fields(template.kind, rng)
    expression = template.expression.format(**fields)
    return {
        "prompt": template.text.format(**fields),
        "expression": expression,
        "calls": [{"name": "calculator", "arguments": {"expression": expression}}],
    }


# ------------------------------------------------------------------------- program-of-thought
_NAMES_OF = dict(zip(WORD, PROGRAM_NAMES, strict=True))


def program(template: Template, fields: dict[str, Any]) -> str:
    """The program that solves `template`'s problem with these `fields`: one assignment a
    number, in the order the words give them, then `print` of the computation over the names
    (integer division for `share`, so it prints an integer)."""
    names = _NAMES_OF[template]
    order = sorted(names, key=lambda field: template.text.index("{" + field + "}"))
    lines = [f"{names[field]} = {fields[field]}" for field in order]
    computation = template.expression.format(**names).replace(" / ", " // ")
    return "\n".join([*lines, f"print({computation})"])


def _program_task(template: Template, rng: random.Random) -> dict[str, Any]:
    fields = _word_fields(template.kind, rng)
    return {
        "prompt": template.text.format(**fields),
        "expression": template.expression.format(**fields),  # the answer's value
        "calls": [{"name": "python", "arguments": {"code": program(template, fields)}}],
    }


# ------------------------------------------------------------------------- dependent calls
# fmt: off
_DEPENDENT = (
    Template("price", "How much do {n} {item} cost?"),
    Template("price", "What do {n} {item} cost in total?"),
    Template("price", "{name} buys {n} {item}. How much does {name} pay?"),
    Template("price", "Find the price of {n} {item}."),
    Template("order", "How much does {name}'s order cost?"),
    Template("order", "What is the total price of {name}'s order?"),
    Template("order", "{name} placed an order. How much must {name} pay for it?"),
    Template("order", "Work out what {name} owes for the order."),
    Template("two_prices", "How much do {n} {item} and {m} {item2} cost together?"),
    Template("two_prices", "{name} buys {n} {item} and {m} {item2}. How much does {name} pay?"),
    Template("two_prices", "What is the total cost of {n} {item} plus {m} {item2}?"),
    Template("two_prices", "Find what {n} {item} and {m} {item2} cost in all."),
)
# fmt: on


def _dependent_task(template: Template, rng: random.Random) -> dict[str, Any]:
    goods = rng.sample(_GOODS, 4)
    prices = {item: rng.randint(2, 99) for item in goods}
    names = rng.sample(_NAMES, 3)
    orders = {name: [rng.randint(2, 19), rng.choice(goods)] for name in names}
    fields = {"name": names[0], "item": goods[0], "item2": goods[1]}
    fields.update(n=rng.randint(2, 19), m=rng.randint(2, 19))
    if template.kind == "price":
        calls = [("price", {"item": goods[0]})]
        expression = f"{fields['n']} * {prices[goods[0]]}"
    elif template.kind == "order":
        count, item = orders[names[0]]
        calls = [("order", {"customer": names[0]}), ("price", {"item": item})]
        expression = f"{count} * {prices[item]}"
    else:
        calls = [("price", {"item": goods[0]}), ("price", {"item": goods[1]})]
        expression = f"{fields['n']} * {prices[goods[0]]} + {fields['m']} * {prices[goods[1]]}"
    calls.append(("calculator", {"expression": expression}))
    return {
        "prompt": template.text.format(**fields),
        "expression": expression,
        "prices": prices,
        "orders": {name: f"{count} {item}" for name, (count, item) in orders.items()},
        "calls": [{"name": name, "arguments": args} for name, args in calls],
    }


# ------------------------------------------------------------------------- mixed
# Held out (every fourth): facts SmolLM2-135M-Instruct states right in a sentence with no
# training (greedy, the family's system prompt, 2026-12-07: "A minute is equivalent to 60
# seconds.", "A spider has 8 legs.", "A hexagon has 6 sides.", "A week is 7 days."), so a
# held-out fact measures the decision to answer without the calculator in the answer's form,
# not knowledge a 135M model lacks (it said 365.25 days for months in a year, 5 wheels for a
# bicycle). The training facts include ones it does not know; the warm start shows them.
_FACTS = (  # (question, answer): each one template of kind `fact`; every fourth held out
    ("How many hours are in a day?", 24),
    ("How many minutes are in an hour?", 60),
    ("How many months are in a year?", 12),
    ("How many seconds are in a minute?", 60),
    ("How many sides does a triangle have?", 3),
    ("How many wheels does a bicycle have?", 2),
    ("How many legs does a dog have?", 4),
    ("How many legs does a spider have?", 8),
    ("How many sides does a square have?", 4),
    ("How many cents are in a dollar?", 100),
    ("How many days are in a leap year?", 366),
    ("How many sides does a hexagon have?", 6),
    ("How many players does a soccer team have on the field?", 11),
    ("How many continents are there on Earth?", 7),
    ("How many weeks are in a year?", 52),
    ("How many days are in a week?", 7),
)
_MIXED = (
    Template("arith", "What is {e}?"),
    Template("arith", "Compute {e}."),
    Template("arith", "Work out {e}."),
    Template("arith", "How much is {e}?"),
    Template("reply", "Reply with {n}."),
    Template("reply", "Answer with the number {n}."),
    Template("reply", "Say {n} and nothing else."),
    Template("reply", "Your answer is {n}. Reply with it."),
    *(Template("fact", question) for question, _ in _FACTS),
)
_FACT_ANSWERS = dict(_FACTS)


def _mixed_task(template: Template, rng: random.Random) -> dict[str, Any]:
    if template.kind == "arith":
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 999)
        shapes = (f"{a} * {b} + {c}", f"{a} * {b} - {min(c, a * b)}", f"({a} + {b}) * {c}")
        expression = rng.choice(shapes)
        return {
            "prompt": template.text.format(e=expression),
            "expression": expression,
            "calls": [{"name": "calculator", "arguments": {"expression": expression}}],
        }
    if template.kind == "reply":
        n = rng.randint(10, 9999)
        return {"prompt": template.text.format(n=n), "answer": str(n), "calls": []}
    return {"prompt": template.text, "answer": str(_FACT_ANSWERS[template.text]), "calls": []}


_FAMILY_TEMPLATES: dict[str, tuple[tuple[Template, ...], Callable[..., dict[str, Any]]]] = {
    "word_problems": (WORD, _word_task),
    "dependent": (_DEPENDENT, _dependent_task),
    "mixed": (_MIXED, _mixed_task),
    "program": (WORD, _program_task),
}


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")


def templates(family: str, split: str) -> list[tuple[str, Template]]:
    """(template id, template) of `family` in `split` ("train" or "eval"): every fourth
    template of each kind is held out (eval only), the rest train."""
    _check_family(family)
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    out, seen = [], {}
    for template in _FAMILY_TEMPLATES[family][0]:
        index = seen.get(template.kind, 0)
        seen[template.kind] = index + 1
        held_out = index % 4 == 3
        if held_out == (split == "eval"):
            out.append((f"{template.kind}/{index}", template))
    return out


def generate_family_tasks(family: str, split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """`n` tasks of `family` from the templates of `split`, the same for the same arguments.
    A kind is drawn uniformly, then one of its templates; `answer` is the calls' result."""
    pool = templates(family, split)
    kinds = sorted({t.kind for _, t in pool})
    make = _FAMILY_TEMPLATES[family][1]
    rng = random.Random(f"calculator-{family}-{split}-{seed}")
    tasks = []
    for i in range(n):
        kind = rng.choice(kinds)
        template_id, template = rng.choice([(k, t) for k, t in pool if t.kind == kind])
        task = make(template, rng)
        if "expression" in task:
            value = evaluate(task["expression"])
            assert value.denominator == 1 and value >= 0, task
            task["answer"] = str(value.numerator)
        task.update(
            task_id=f"calculator-{family}-{split}-s{seed}-{i}",
            kind=kind,
            template=template_id,
            family=family,
            needs_tool=bool(task["calls"]),
        )
        tasks.append(task)
    return tasks


def system_prompt(family: str) -> str:
    _check_family(family)
    return SYSTEM_PROMPTS[family]


def family_tools(family: str, get_task: Callable[[], dict[str, Any]]) -> list[Callable[..., str]]:
    """The tools of `family`'s episodes; `get_task()` is the episode's task (the lookups read
    its tables). The calculator is the one without an example in its description; `program`'s
    tool is `python` without one (it runs in the episode's sandbox: `make_sandbox`)."""
    _check_family(family)
    if family == "program":
        return [python_without_example]
    if family != "dependent":
        return [calculator_without_example]

    def price(item: str) -> str:
        """The price of one item, in dollars.

        Args:
            item: The item, as the question names it.
        """
        prices = get_task()["prices"]
        key = item.strip().lower()
        if key not in prices:
            return f"Error: no price for {item!r}; priced items: {', '.join(sorted(prices))}"
        return str(prices[key])

    def order(customer: str) -> str:
        """A customer's order: how many of which item.

        Args:
            customer: The customer's name.
        """
        orders = get_task()["orders"]
        key = customer.strip().removesuffix("'s").strip()
        if key not in orders:
            return f"Error: no order for {customer!r}"
        return orders[key]

    return [calculator_without_example, price, order]


SANDBOX_LIMITS = Limits(wall_s=10, cpu_s=10, memory_mb=128, workspace_mb=8)
"""Each `program` episode's sandbox: a session reserves `memory_mb + workspace_mb` of the
host-wide sandbox budget while it lives (`forge_agent.sandbox.admission`, 80% of memory: 19.3 GB
on a 24 GiB host). The defaults (512 + 256 MB) let ~25 of a run's 64 concurrent eval episodes
in; the first run's step-0 eval had 30 of 64 refused (infra). 136 MB lets 64 in at 8.7 GB; a
program of a few assignments and a print needs less than 64 MB."""


def make_sandbox(family: str, backend: Sandbox | None = None) -> SandboxSession | None:
    """An episode's sandbox session of `family` (a bubblewrap one unless `backend` is given),
    or None: only `program` runs code."""
    _check_family(family)
    if family != "program":
        return None
    return (backend or _backend()).session(SANDBOX_LIMITS)


_BACKEND: list[Sandbox] = []


def _backend() -> Sandbox:
    if not _BACKEND:
        _BACKEND.append(new_sandbox("bwrap"))
    return _BACKEND[0]


def demonstration(task: dict[str, Any], sandbox: SandboxSession | None = None) -> list[Message]:
    """A correct conversation for `task`: its calls, one a turn, each answered by the tool
    the env offers (`family_tools`; `program`'s code runs in `sandbox`, or in a session of
    its own), then the answer; a no-tool task answers at once."""
    if task["family"] == "program" and sandbox is None:
        with make_sandbox("program") as session:
            return demonstration(task, session)
    tools = {
        fn.__name__: functools.partial(fn, sandbox=sandbox) if fn is python_without_example else fn
        for fn in family_tools(task["family"], lambda: task)
    }
    convo: list[Message] = [
        {"role": "system", "content": system_prompt(task["family"])},
        {"role": "user", "content": task["prompt"]},
    ]
    for k, call in enumerate(task["calls"]):
        reply = tools[call["name"]](**call["arguments"])
        assert not reply.startswith("Error"), (task, call, reply)
        call_id = f"call_{k}"
        function = {"name": call["name"], "arguments": json.dumps(call["arguments"])}
        convo.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            }
        )
        convo.append(
            {"role": "tool", "tool_call_id": call_id, "name": call["name"], "content": reply}
        )
    if task["calls"]:  # the last call's reply is the answer (what a program printed)
        printed = f"stdout:\n{task['answer']}\nexit code 0"
        assert reply in (str(task["answer"]), printed), (task, reply)
    convo.append({"role": "assistant", "content": str(task["answer"])})
    return convo

"""reasoning-gym's scorers that evaluate the answer, split so the answer key never reaches the
process the answer runs in (issue 50).

A reasoning-gym scorer, ``score_answer(answer, entry)``, reads the answer and the whole task
entry (its ``answer`` and ``metadata``: the answer key) in one function. Where it only compares
text, running it in the judge's sandbox is enough. Where it evaluates the text (``eval``,
``sympy.parse_expr``), whatever the answer runs shares a process with the key, and an escape
from the eval guard would read it and forge the verdict. So each of these tasks is scored in
two halves (`SplitScorer`):

- ``public(entry)``: what the question itself states (countdown's numbers and target, the
  integrand and its variable, jugs' capacities and target; most tasks need nothing): all the
  sandbox receives beside the answer;
- ``inside(dataset, answer, public)``, in the judge's sandbox: what the answer computes, as
  plain JSON data (a number, a string, a list of numbers), or None where it computes nothing
  the scorer accepts;
- ``outside(value, answer, entry)``, on the host: the verdict, comparing ``value`` with the
  key by plain data operations (the value is never parsed or evaluated).

Where the verdict needs only what the question states (countdown, puzzle24, jugs, the
integration tasks) the whole verdict is computed inside, by reasoning-gym's own
``score_answer`` over the public fields, and the host checks it is a number. Elsewhere the
comparison is re-implemented here rather than calling ``score_answer``, because that function
needs the key and the evaluated answer together; each half follows the scorer of reasoning-gym
0.1.25 line by line, and `tests/test_reasoning_gym_scorers.py` holds the two to the same
verdicts, but for one hole this closes: reasoning-gym's number_sorting pays 1.0 for a list of
``'nan'`` as long as the key (NaN is never more than its tolerance away); here a number that
is not finite is wrong. Strings compared for equality travel as `fingerprint`s (a long one
as its digest), so a 100 x 100 matrix costs a short reply. An answer is evaluated with the
builtins alone (reasoning-gym evaluates it in its module's namespace, whose other names no
answer needs).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forge_agent.rewards.judge import JudgeError

__all__ = [
    "SPLIT_SCORERS",
    "SplitScorer",
    "fingerprint",
    "inside_scorer",
    "redacted",
    "split_scorer",
]

Entry = dict[str, Any]
FINGERPRINT_CHARS = 1000  # a compared string longer than this travels as its digest
_DIGEST = "sha256:"


@dataclass(frozen=True)
class SplitScorer:
    """One task's scorer in two halves (see the module docstring)."""

    public: Callable[[Entry], dict[str, Any]]
    inside: Callable[[Any, str, dict[str, Any]], Any]
    outside: Callable[[Any, str, Entry], float]


def fingerprint(text: str) -> str:
    """`text` itself, or its SHA-256 digest when it is long (or looks like a digest): what the
    sandbox reports of a string the host compares for equality, and what the host compares."""
    if len(text) <= FINGERPRINT_CHARS and not text.startswith(_DIGEST):
        return text
    return _DIGEST + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _evaluated(answer: str) -> Any:
    """The answer evaluated with the builtins alone (the eval guard checks it first)."""
    return eval(answer, {})


# ---------------------------------------------------------------------- the halves, shared
def _nothing(entry: Entry) -> dict[str, Any]:
    return {}


def _metadata(*keys: str) -> Callable[[Entry], dict[str, Any]]:
    """``public``: these fields of the entry's metadata (each stated in the question)."""

    def public(entry: Entry) -> dict[str, Any]:
        return {key: entry["metadata"][key] for key in keys}

    return public


def _own_scorer(dataset: Any, answer: str, public: dict[str, Any]) -> float:
    """``inside``: reasoning-gym's own verdict from the public fields alone."""
    return float(dataset.score_answer(answer, {"metadata": public}))


def _reported(value: Any, answer: str, entry: Entry) -> float:
    """``outside`` of a verdict computed inside: a finite number, else the policy's failure."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise JudgeError(f"the sandboxed scorer gave no finite number: {str(value)[:100]!r}")
    return float(value)


def _text(value: Any) -> str | None:
    """A fingerprint the sandbox reported, or None (it computed nothing; or not a string)."""
    if value is not None and not isinstance(value, str):
        raise JudgeError(f"the sandboxed scorer gave no string: {str(value)[:100]!r}")
    return value


def _exact_or_partial(partial: float) -> Callable[[Any, str, Entry], float]:
    """``outside`` of the tasks that pay 1.0 for the key's text and `partial` for a Python
    value that prints as the key (binary_matrix, string_insertion)."""

    def outside(value: object, answer: str, entry: Entry) -> float:
        if answer == entry["answer"]:
            return 1.0
        return partial if _text(value) == fingerprint(entry["answer"]) else 0.0

    return outside


# ---------------------------------------------------------------------- one task each
def _binary_matrix_inside(dataset: Any, answer: str, public: dict[str, Any]) -> str | None:
    # BinaryMatrixDataset._matrix_to_str(eval(answer)), the matrix as rows of numbers
    try:
        matrix = _evaluated(answer)
        return fingerprint("\n".join(" ".join(str(x) for x in row) for row in matrix))
    except Exception:
        return None


def _bitwise_inside(dataset: Any, answer: str, public: dict[str, Any]) -> str | None:
    # verify_solution: int(str(user_solution), 0), compared with eval(problem) (the key)
    try:
        return fingerprint(str(int(str(answer), 0)))
    except Exception:
        return None


def _bitwise_outside(value: Any, answer: str, entry: Entry) -> float:
    return 1.0 if _text(value) == fingerprint(str(int(entry["answer"], 0))) else 0.0


def _n_queens_inside(dataset: Any, answer: str, public: dict[str, Any]) -> str | None:
    # NQueensDataset._board_to_string(eval(answer))
    try:
        board = _evaluated(answer)
        return fingerprint("\n".join(" ".join(x for x in row) for row in board))
    except Exception:
        return None


def _n_queens_outside(value: Any, answer: str, entry: Entry) -> float:
    valid = entry["metadata"]["valid_answers"]
    if answer in valid:
        return 1.0
    return 0.5 if _text(value) in {fingerprint(v) for v in valid} else 0.0


def _number_sorting_inside(dataset: Any, answer: str, public: dict[str, Any]) -> Any:
    # the answer is read as JSON, never evaluated; the scorer evals its own key
    try:
        numbers = json.loads(answer.replace("'", '"'))
        if not isinstance(numbers, list):
            return None
        return [float(n) for n in numbers]
    except Exception:
        return None


def _number_sorting_outside(value: Any, answer: str, entry: Entry) -> float:
    if value is None:
        return 0.0
    if not isinstance(value, list) or not all(isinstance(v, int | float) for v in value):
        raise JudgeError(f"the sandboxed scorer gave no list of numbers: {str(value)[:100]!r}")
    try:
        expected = json.loads(entry["answer"])
    except json.JSONDecodeError:
        expected = ast.literal_eval(entry["answer"])  # reasoning-gym: eval(entry["answer"])
    if len(value) != len(expected):
        return 0.0
    given, wanted = [float(v) for v in value], [float(n) for n in expected]
    if not all(map(math.isfinite, given)):  # reasoning-gym pays 1.0 for ['nan', 'nan', ...]
        return 0.0
    descending = entry["metadata"]["direction"] != "ascending"
    if given != sorted(given, reverse=descending):
        return 0.0
    return 1.0 if all(not abs(g - w) > 1 for g, w in zip(given, wanted, strict=True)) else 0.0


def _polynomial_inside(dataset: Any, answer: str, public: dict[str, Any]) -> str | None:
    # sympy.srepr of parse_expr(answer); reasoning-gym compares the parsed answer and key
    # with ==, which is structural (as srepr is) but for a Poly, equal to its expression
    import sympy

    try:
        parsed = sympy.parse_expr(answer)
        if isinstance(parsed, sympy.Poly):
            parsed = parsed.as_expr()
        return fingerprint(sympy.srepr(parsed))
    except Exception:
        return None


@functools.lru_cache(maxsize=4096)
def _key_srepr(key: str) -> str:
    """srepr of the key, parsed on the host (the key is reasoning-gym's text, not the policy's)."""
    import sympy

    return sympy.srepr(sympy.parse_expr(key))


def _polynomial_outside(value: Any, answer: str, entry: Entry) -> float:
    return 1.0 if _text(value) == fingerprint(_key_srepr(entry["answer"])) else 0.0


def _spiral_matrix_inside(dataset: Any, answer: str, public: dict[str, Any]) -> str | None:
    try:
        return fingerprint(" ".join(str(item) for item in _evaluated(answer.strip())))
    except Exception:
        return None


def _spiral_matrix_outside(value: Any, answer: str, entry: Entry) -> float:
    key = entry["answer"].strip()
    if not answer:
        return 0.0
    if answer.strip() == key:
        return 1.0
    return 0.1 if _text(value) == fingerprint(key) else 0.0


def _string_insertion_inside(dataset: Any, answer: str, public: dict[str, Any]) -> str | None:
    try:
        return fingerprint("".join(_evaluated(answer)))
    except Exception:
        return None


def _jugs_public(entry: Entry) -> dict[str, Any]:
    puzzle = entry["metadata"]["puzzle"]
    return {"puzzle": {"jug_capacities": puzzle["jug_capacities"], "target": puzzle["target"]}}


# ---------------------------------------------------------------------- as strict as the task
MAX_FORM_CHARS = 10_000
"""The longest answer the host reads the form of (longer: not of the task's form)."""

_ELEMENTARY = frozenset(
    {
        "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "asec",
        "acsc", "sinh", "cosh", "tanh", "coth", "asinh", "acosh", "atanh", "acoth", "exp",
        "log", "ln", "sqrt", "Abs",
    }
)  # fmt: skip


def _form(answer: str, names: frozenset | None, calls: frozenset, power: bool) -> list[int] | None:
    """The integers an answer is written with, when it is of a task's form: a Python
    expression of numbers, `+ - * /` (and `**` where `power`), parentheses, unary signs, the
    `names` (any name where None) and calls of `calls` (positional arguments of the same
    form). None otherwise: a
    call of anything else (`integrate`, `Integral`, `expand`, `factorial`), an attribute, a
    subscript, any other name or syntax. Read on the host with `ast` (never evaluated)."""
    text = answer.strip()
    if not text or len(text) > MAX_FORM_CHARS:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    ints: list[int] = []
    operators = (ast.Add, ast.Sub, ast.Mult, ast.Div) + ((ast.Pow,) if power else ())

    def ok(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                return False
            if isinstance(node.value, int):
                ints.append(node.value)
            return True
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, operators) and ok(node.left) and ok(node.right)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, ast.USub | ast.UAdd) and ok(node.operand)
        if isinstance(node, ast.Name):
            return names is None or node.id in names
        if isinstance(node, ast.Call):
            return (
                isinstance(node.func, ast.Name)
                and node.func.id in calls
                and not node.keywords
                and all(ok(a) for a in node.args)
            )
        return False

    try:
        return ints if ok(tree.body) else None
    except RecursionError:
        return None


def _strict(
    rule: Callable[[str, Entry], bool], refused: float, outside: Callable[[Any, str, Entry], float]
) -> Callable[[Any, str, Entry], float]:
    """``outside`` that pays `refused` (the task's own score for a wrong answer) where the
    answer breaks the task's `rule`, even where reasoning-gym's scorer pays it, else what
    `outside` gives."""

    def strict(value: object, answer: str, entry: Entry) -> float:
        verdict = outside(value, answer, entry)
        return verdict if rule(answer, entry) else min(verdict, refused)

    return strict


def _arithmetic_of_the_numbers(answer: str, entry: Entry) -> bool:
    """puzzle24 and countdown: an arithmetic expression (`+ - * /`, parentheses) of the
    question's own numbers, each once (reasoning-gym's puzzle24 never checks they are the
    puzzle's; countdown's takes any sympy function of them and digit-free constants)."""
    ints = _form(answer, frozenset(), frozenset(), power=False)
    return ints is not None and sorted(ints) == sorted(entry["metadata"]["numbers"])


def _antiderivative_form(answer: str, entry: Entry) -> bool:
    """The integration tasks: an expression of the variable, constants (any other name: `C`,
    `E`, `pi`) and elementary functions: no unevaluated `Integral`, no `integrate(...)` of
    the question."""
    return _form(answer, None, _ELEMENTARY, power=True) is not None


def _polynomial_form(answer: str, entry: Entry) -> bool:
    """polynomial_multiplication: a polynomial in the question's variables (a `Poly(...)` of
    one too), no `expand(...)` of the question."""
    names = frozenset({*entry["metadata"]["variables"], "Poly"})
    return _form(answer, names, frozenset({"Poly"}), power=True) is not None


_INTEGRATION = SplitScorer(
    _metadata("variable", "integrand"), _own_scorer, _strict(_antiderivative_form, 0.0, _reported)
)

SPLIT_SCORERS: dict[str, SplitScorer] = {
    "binary_matrix": SplitScorer(_nothing, _binary_matrix_inside, _exact_or_partial(0.1)),
    "bitwise_arithmetic": SplitScorer(_nothing, _bitwise_inside, _bitwise_outside),
    "countdown": SplitScorer(
        _metadata("numbers", "target"),
        _own_scorer,
        _strict(_arithmetic_of_the_numbers, 0.05, _reported),
    ),
    "intermediate_integration": _INTEGRATION,
    "jugs": SplitScorer(_jugs_public, _own_scorer, _reported),
    "n_queens": SplitScorer(_nothing, _n_queens_inside, _n_queens_outside),
    "number_sorting": SplitScorer(_nothing, _number_sorting_inside, _number_sorting_outside),
    "polynomial_multiplication": SplitScorer(
        _nothing, _polynomial_inside, _strict(_polynomial_form, 0.0, _polynomial_outside)
    ),
    "puzzle24": SplitScorer(  # inside: its config's value range; here: the puzzle's numbers
        _nothing, _own_scorer, _strict(_arithmetic_of_the_numbers, 0.01, _reported)
    ),
    "simple_integration": _INTEGRATION,
    "spiral_matrix": SplitScorer(_nothing, _spiral_matrix_inside, _spiral_matrix_outside),
    "string_insertion": SplitScorer(_nothing, _string_insertion_inside, _exact_or_partial(0.1)),
}
"""The reasoning-gym tasks whose scorer evaluates the answer (or calls `verify_solution`),
each split; `tests/test_reasoning_gym_scorers.py` fails on a new one."""


def split_scorer(entry: Entry) -> SplitScorer | None:
    """The split of `entry`'s task (a composite's entry: its source task's), if it has one."""
    return SPLIT_SCORERS.get(entry["metadata"]["source_dataset"])


def redacted(entry: Entry) -> dict[str, Any]:
    """What the sandbox is given of `entry` (which has a split): its task and public fields."""
    task = entry["metadata"]["source_dataset"]
    return {"task": task, **SPLIT_SCORERS[task].public(entry)}


def inside_scorer(task: str, config: dict[str, Any]) -> Callable[[str, dict[str, Any]], Any]:
    """The sandboxed half of the splits of `task` under `config`, as the judge server builds it
    (its `ScorerRef` is ``forge_agent.rewards.reasoning_gym_scorers:inside_scorer``):
    ``inside(answer, {"task": source task, **public})``; a composite's source task is one of its
    datasets, scored under that dataset's config."""
    import reasoning_gym

    dataset = reasoning_gym.create_dataset(task, seed=0, size=1, **config)

    def inside(answer: str, public: dict[str, Any]) -> Any:
        source = public["task"]
        scoring = dataset.datasets[source] if task == "composite" else dataset
        fields = {k: v for k, v in public.items() if k != "task"}
        return SPLIT_SCORERS[source].inside(scoring, answer, fields)

    return inside

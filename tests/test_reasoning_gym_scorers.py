"""reasoning-gym's evaluating scorers, split (`forge_agent.rewards.reasoning_gym_scorers`):
the verdicts are reasoning-gym's own, the answer key never reaches the judge's sandbox, and a
task whose scorer starts evaluating the answer fails here until it is split. Verdicts come
through `ReasoningGymEnv.judge` and the real judge server (its eval guard installed)."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from typing import Any

import pytest
import reasoning_gym
from reasoning_gym.factory import DATASETS

from forge_agent.env import make_env
from forge_agent.env.adapters.reasoning_gym import extract_answer
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import load_tasks
from forge_agent.rewards.judge import judge_server
from forge_agent.rewards.reasoning_gym_scorers import SPLIT_SCORERS

SPLIT_TASKS = sorted(SPLIT_SCORERS)


def _answers(task: str, entry: dict[str, Any]) -> list[str]:
    """The entry's own answer, wrong and malformed ones, and the forms that earn partial
    credit (a Python list where the key is text)."""
    key, meta = str(entry["answer"]), entry["metadata"]
    answers = [key, "0", "", "(((", "[[1, 2], [3]]", key + "x"]
    if task in ("binary_matrix", "spiral_matrix"):
        answers += [str(meta["solution"]), str(meta["solution"][::-1])]
    if task == "string_insertion":
        answers += [str(list(key)), str(list(key[::-1]))]
    if task == "n_queens":
        answers += [str(meta["solutions"][0]), *meta["valid_answers"][:2], str([["Q"] * 3])]
    if task == "number_sorting":
        numbers = json.loads(key.replace("'", '"'))
        answers += [
            str(numbers[::-1]),
            str([float(n) + 0.5 for n in numbers]),  # within reasoning-gym's tolerance of 1
            str([float(n) + 2 for n in numbers]),
            "[1e999]",
        ]
    if task == "bitwise_arithmetic":
        value = int(key, 0)
        answers += [str(value), hex(value + 1), "1" * 5000]
    if task == "polynomial_multiplication":
        answers += [f"Poly({key})", key + " + 1", key + " + 0.0"]
    if task in ("countdown", "puzzle24"):
        answers += [key.replace("*", "+"), "1+1", "24"]
    if task in ("simple_integration", "intermediate_integration"):
        answers += [key.replace(" + C", ""), "x**2 + C", meta["integrand"]]
    if task == "jugs":
        answers += ["[]", '["fill A"]', '["fill Z"]']
    return answers


def _verdicts(env_id: str, tasks: list[dict], answers: list[list[str]], **kwargs) -> list:
    """`ReasoningGymEnv.judge`'s score of each answer to its task (one env, the answers to a
    task judged side by side)."""
    env = make_env(env_id, **kwargs)

    async def go() -> list[list[float]]:
        scores = []
        for task, given in zip(tasks, answers, strict=True):
            await env.reset(task, 0)
            judged = await asyncio.gather(*(env.judge(f"<answer>{a}</answer>") for a in given))
            scores.append([rewards["score"] for rewards, _ in judged])
        await env.close()
        return scores

    return asyncio.run(go())


@pytest.mark.parametrize("task", SPLIT_TASKS)
def test_a_split_scorer_gives_reasoning_gyms_own_verdicts(task):
    dataset = reasoning_gym.create_dataset(task, seed=1, size=3)
    tasks = [{"prompt": e["question"], "answer": str(e["answer"]), "entry": e} for e in dataset]
    answers = [_answers(task, e) for e in dataset]
    expected = [
        [float(dataset.score_answer(extract_answer(f"<answer>{a}</answer>"), e)) for a in given]
        for e, given in zip(dataset, answers, strict=True)
    ]
    assert _verdicts(f"reasoning_gym:{task}", tasks, answers) == expected


def test_a_list_of_nan_does_not_sort_numbers():
    """reasoning-gym's own number_sorting pays 1.0 for it (NaN is within any tolerance)."""
    dataset = reasoning_gym.create_dataset("number_sorting", seed=0, size=1)
    entry = dataset[0]
    nans = str(["nan"] * len(entry["metadata"]["sorted_numbers"]))
    assert dataset.score_answer(nans, entry) == 1.0
    task = {"prompt": entry["question"], "answer": entry["answer"], "entry": entry}
    assert _verdicts("reasoning_gym:number_sorting", [task], [[nans]]) == [[0.0]]


def _as_python_list(entry: dict[str, Any]) -> str:
    return str(entry["metadata"]["solution"])


def _as_json(entry: dict[str, Any]) -> str:
    return entry["answer"].replace("'", '"')


@pytest.mark.parametrize(
    ("task", "config", "other_form", "its_score"),
    [  # a 30 kB Python list (its value travels as a digest); 1,000 numbers as JSON (~12 kB)
        ("spiral_matrix", {"min_n": 100, "max_n": 100}, _as_python_list, 0.1),
        ("number_sorting", {"min_numbers": 1000, "max_numbers": 1000}, _as_json, 1.0),
    ],
)
def test_the_value_of_a_large_task_comes_back_whole(task, config, other_form, its_score):
    (entry,) = reasoning_gym.create_dataset(task, seed=0, size=1, **config)
    t = {"prompt": entry["question"], "answer": entry["answer"], "entry": entry}
    answers = [entry["answer"], other_form(entry), "0"]
    assert _verdicts(f"reasoning_gym:{task}", [t], [answers], **config) == [[1.0, its_score, 0.0]]


def _leaves(value: Any) -> list[Any]:
    """`value` and every part of it (dict keys and values, list items, dataclass fields)."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        found.append(item)
        if isinstance(item, dict):
            todo += [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple | set):
            todo += list(item)
        elif hasattr(item, "__dataclass_fields__"):
            todo += [getattr(item, f) for f in item.__dataclass_fields__]
    return found


_BOOKKEEPING = ("source_dataset", "source_index", "difficulty")


def _secrets(entry: dict[str, Any]) -> list[Any]:
    """The answer key: the entry's answer and every metadata field the question does not state
    as a value (solutions, valid answers, a solving expression); bare numbers are sizes."""
    public = set(SPLIT_SCORERS[entry["metadata"]["source_dataset"]].public(entry))
    held = [
        value
        for name, value in entry["metadata"].items()
        if name not in public and name not in _BOOKKEEPING and not isinstance(value, int | float)
    ]
    return [entry["answer"], *held, *entry["metadata"].get("valid_answers", [])]


def _sent_requests(monkeypatch, env_id: str, tasks: list[dict], **kwargs) -> list[tuple]:
    """Everything `ReasoningGymEnv.judge` hands the judge server for a wrong answer to each
    task (the scorer's arguments, the answer, the entry), as sent."""
    server, sent = judge_server(), []
    real_submit = server.submit

    def submit(ref, answer, entry, *args, **kw):
        sent.append((ref.factory, ref.args, answer, entry))
        return real_submit(ref, answer, entry, *args, **kw)

    monkeypatch.setattr(server, "submit", submit)
    _verdicts(env_id, tasks, [["0"]] * len(tasks), **kwargs)
    return sent


def _reached_the_sandbox(secret: Any, sent: list[tuple]) -> bool:
    leaves = _leaves(sent)
    if any(leaf == secret for leaf in leaves):
        return True
    return isinstance(secret, str) and any(isinstance(v, str) and secret in v for v in leaves)


@pytest.mark.parametrize("task", SPLIT_TASKS)
def test_the_answer_key_never_reaches_the_judges_sandbox(monkeypatch, task):
    """Before: the whole entry went in, its answer and metadata beside the evaluated answer."""
    tasks = [
        {"prompt": e["question"], "answer": str(e["answer"]), "entry": e}
        for e in reasoning_gym.create_dataset(task, seed=2, size=3)
    ]
    sent = _sent_requests(monkeypatch, f"reasoning_gym:{task}", tasks)
    assert sent, "nothing reached the judge server"
    for t in tasks:
        for secret in _secrets(t["entry"]):
            assert not _reached_the_sandbox(secret, sent), (task, secret)


def test_a_composites_evaluating_tasks_keep_their_keys_out_too(monkeypatch):
    kwargs = {"datasets": [{"name": "countdown"}, {"name": "n_queens"}]}
    tasks = load_tasks(ResolvedEnv.of("reasoning_gym:composite", kwargs=kwargs), "train", 6, 3)
    assert {t["entry"]["metadata"]["source_dataset"] for t in tasks} == {"countdown", "n_queens"}
    sent = _sent_requests(monkeypatch, "reasoning_gym:composite", tasks, **kwargs)
    for t in tasks:
        for secret in _secrets(t["entry"]):
            assert not _reached_the_sandbox(secret, sent), secret
    assert _verdicts(
        "reasoning_gym:composite", tasks, [[t["answer"]] for t in tasks], **kwargs
    ) == [[1.0]] * len(tasks)


_EVALUATES = re.compile(r"\b(eval|exec|parse_expr|sympify|verify_solution)\(")


def test_every_task_whose_scorer_evaluates_the_answer_is_split():
    """A reasoning-gym release with a new evaluating scorer fails here rather than keeping its
    key beside the answer in the sandbox."""
    evaluating = {
        task
        for task, (dataset_class, _) in DATASETS.items()
        if _EVALUATES.search(inspect.getsource(dataset_class.score_answer))
    }
    assert evaluating, "no evaluating scorer found: is the source scan still working?"
    assert evaluating <= set(SPLIT_SCORERS), sorted(evaluating - set(SPLIT_SCORERS))

"""Task loading: disjoint train/eval splits, determinism and a resumable training stream."""

from __future__ import annotations

import itertools
import json

import pytest

from forge_agent.env import EnvConfig
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import TaskStream, load_tasks

SHIPPED_ENV_IDS = ("blackjack", "calculator", "code_exec", "frozen_lake", "sql_mcp")


# Difficulty 3 is left out: envs/calculator/tasks.py can draw "(a + b) * c - d" < 0 and
# then fails its own non-negative assertion (e.g. "(29 + 11) * 11 - 483").
@pytest.mark.parametrize("difficulty", [1, 2])
def test_calculator_eval_prompts_never_appear_in_training(difficulty):
    kwargs = {"difficulty": difficulty}
    eval_tasks = load_tasks(ResolvedEnv.of("calculator", kwargs=kwargs), "eval", 500, seed=10_000)
    train_tasks = load_tasks(ResolvedEnv.of("calculator", kwargs=kwargs), "train", 5_000, seed=0)
    assert len(eval_tasks) == 500 and len(train_tasks) == 5_000
    assert not {t["prompt"] for t in eval_tasks} & {t["prompt"] for t in train_tasks}
    # The same arithmetic as a word problem counts as the same problem.
    assert not {t["expression"] for t in eval_tasks} & {t["expression"] for t in train_tasks}


def test_calculator_splits_stay_disjoint_when_both_use_the_same_seed():
    eval_tasks = load_tasks(ResolvedEnv.of("calculator"), "eval", 300, seed=0)
    train_tasks = load_tasks(ResolvedEnv.of("calculator"), "train", 3_000, seed=0)
    assert not {t["expression"] for t in eval_tasks} & {t["expression"] for t in train_tasks}
    assert not {t["task_id"] for t in eval_tasks} & {t["task_id"] for t in train_tasks}


def test_calculator_tasks_follow_the_difficulty_in_env_kwargs():
    (task,) = load_tasks(ResolvedEnv.of("calculator", kwargs={"difficulty": 2}), "eval", 1, seed=3)
    assert task["task_id"].startswith("calculator-d2-")


def test_frozen_lake_eval_maps_never_appear_in_training():
    eval_maps = {
        tuple(t["map"]) for t in load_tasks(ResolvedEnv.of("frozen_lake"), "eval", 100, seed=1)
    }
    train_maps = {
        tuple(t["map"]) for t in load_tasks(ResolvedEnv.of("frozen_lake"), "train", 1_000, seed=0)
    }
    assert eval_maps and not eval_maps & train_maps


def test_code_exec_single_split_dataset_is_split_by_task_id_hash():
    from envs.code_exec.env import load_tasks as load_dataset

    everything = {t["task_id"] for t in load_dataset()}
    eval_ids = {
        t["task_id"] for t in load_tasks(ResolvedEnv.of("code_exec"), "eval", 1_000, seed=0)
    }
    train_ids = {
        t["task_id"] for t in load_tasks(ResolvedEnv.of("code_exec"), "train", 1_000, seed=0)
    }
    assert eval_ids and train_ids
    assert not eval_ids & train_ids
    assert eval_ids | train_ids == everything
    # The split depends on the task ids only, not on the seed.
    assert {
        t["task_id"] for t in load_tasks(ResolvedEnv.of("code_exec"), "eval", 1_000, seed=7)
    } == eval_ids


def test_dataset_tasks_are_capped_at_the_split_size_without_repeats():
    tasks = load_tasks(ResolvedEnv.of("code_exec"), "train", 1_000, seed=0)
    ids = [t["task_id"] for t in tasks]
    assert len(ids) == len(set(ids)) < 1_000


@pytest.mark.parametrize("env_id", SHIPPED_ENV_IDS)
def test_load_tasks_is_deterministic_and_seed_dependent(env_id):
    first = load_tasks(ResolvedEnv.of(env_id), "train", 8, seed=0)
    assert first == load_tasks(ResolvedEnv.of(env_id), "train", 8, seed=0)
    other = load_tasks(ResolvedEnv.of(env_id), "train", 8, seed=1)
    assert [t["task_id"] for t in first] != [t["task_id"] for t in other]


def test_unknown_env_id_error_lists_the_registered_ids():
    with pytest.raises(KeyError, match="calculator, code_exec, frozen_lake") as err:
        load_tasks(ResolvedEnv.of("chess"), "eval", 4, seed=0)
    assert "'chess'" in str(err.value)


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="split must be 'train' or 'eval'"):
        load_tasks(ResolvedEnv.of("calculator"), "test", 4, seed=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("env_id", SHIPPED_ENV_IDS)
def test_resumed_stream_yields_the_same_next_items(env_id):
    original = TaskStream(ResolvedEnv.of(EnvConfig(env_id, kwargs={}, train_seed=5)))
    for _ in range(10):
        next(original)
    state = original.state()
    resumed = TaskStream(ResolvedEnv.of(EnvConfig(env_id, kwargs={}, train_seed=5)))
    resumed.load_state(state)
    assert resumed.position == 10
    assert list(itertools.islice(resumed, 40)) == list(itertools.islice(original, 40))


def test_stream_state_survives_a_dataset_epoch_boundary():
    stream = TaskStream(ResolvedEnv.of("code_exec"))
    size = len(load_tasks(ResolvedEnv.of("code_exec"), "train", 1_000, seed=0))
    for _ in range(size + 3):
        next(stream)
    resumed = TaskStream(ResolvedEnv.of("code_exec"))
    resumed.load_state(stream.state())
    assert next(resumed) == next(stream)
    assert stream.epoch == 1


def test_dataset_stream_visits_every_train_task_once_per_epoch_in_new_orders():
    size = len(load_tasks(ResolvedEnv.of("code_exec"), "train", 1_000, seed=0))
    stream = TaskStream(ResolvedEnv.of("code_exec"))
    epoch0 = [next(stream)[0]["task_id"] for _ in range(size)]
    epoch1 = [next(stream)[0]["task_id"] for _ in range(size)]
    assert sorted(epoch0) == sorted(epoch1) and len(set(epoch0)) == size
    assert epoch0 != epoch1


def test_a_dataset_copied_to_another_folder_streams_in_the_same_order(tmp_path):
    """The shuffle is keyed by the tasks, not the file's path: a clone or a temporary copy of
    the data trains in the same order under the same seed (keyed by the path, a test's tmp
    folder drew a new order every run)."""
    rows = "".join(
        json.dumps({"task_id": f"t{i}", "prompt": f"What is {i} + 1?", "answer": i + 1}) + "\n"
        for i in range(40)
    )
    orders = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "tasks.jsonl").write_text(rows)
        data = tmp_path / folder / "tasks.jsonl"
        stream = TaskStream(ResolvedEnv.of(EnvConfig(id="calculator", dataset=str(data))))
        orders.append([next(stream)[0]["task_id"] for _ in range(20)])
    assert orders[0] == orders[1]
    assert orders[0] != sorted(orders[0], key=lambda t: int(t[1:]))  # shuffled, not file order


def test_generated_stream_starts_with_the_train_tasks_of_load_tasks():
    stream = TaskStream(ResolvedEnv.of(EnvConfig("calculator", {"difficulty": 2}, train_seed=3)))
    streamed = [task for task, _ in itertools.islice(stream, 100)]
    assert streamed == load_tasks(
        ResolvedEnv.of("calculator", kwargs={"difficulty": 2}), "train", 100, seed=3
    )


def test_stream_env_seeds_are_deterministic_and_vary():
    seeds_a = [s for _, s in itertools.islice(TaskStream(ResolvedEnv.of("calculator")), 20)]
    seeds_b = [s for _, s in itertools.islice(TaskStream(ResolvedEnv.of("calculator")), 20)]
    assert seeds_a == seeds_b and len(set(seeds_a)) == 20


def test_load_state_refuses_a_state_of_another_stream():
    state = TaskStream(ResolvedEnv.of("calculator")).state()
    with pytest.raises(ValueError, match="seed=0"):
        TaskStream(ResolvedEnv.of(EnvConfig("calculator", kwargs={}, train_seed=1))).load_state(
            state
        )

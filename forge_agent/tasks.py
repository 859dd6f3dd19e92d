"""Tasks for training and evaluation: held-out splits and a resumable training stream.

    eval_tasks = load_tasks("calculator", "eval", n=64, seed=10_000, env_kwargs={"difficulty": 1})
    stream = TaskStream("calculator", {"difficulty": 1}, seed=0)
    task, env_seed = next(stream)          # endless, deterministic
    state = stream.state()                 # save with the checkpoint; `load_state` resumes

How train and eval stay apart (no task is ever in both):
- generated envs (calculator, frozen_lake): each task has a content key (the calculator's
  expression, the lake's map); a hash of the key puts it in "eval" for a fixed
  `HOLDOUT_FRACTION` of the key space and in "train" otherwise, and each split keeps only its
  own tasks. So a problem ("37 * 12", also as a word problem) in the eval set can never be drawn
  for training, whatever the seeds or counts. The generator seeds differ too: even seeds for
  train, odd seeds for eval.
- datasets (code_exec): a dataset's own "test" (or "validation") split is the eval split when
  the dataset has one (hub datasets); a dataset with a single split (a local json/jsonl file,
  like the shipped `envs/code_exec/data/tasks.jsonl`) is split by a hash of `task_id`, the
  same way.

Tasks come in blocks: block b of a generated env is the tasks of one generator seed that fall
in the split; block b of a dataset is epoch b, the split's tasks in a seeded shuffle. A
`TaskStream` walks the train blocks in order, so its state is (block, offset) and resuming is
O(one block).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

__all__ = ["HOLDOUT_FRACTION", "SUPPORTED_ENV_IDS", "Split", "TaskStream", "load_tasks"]

Split = Literal["train", "eval"]

HOLDOUT_FRACTION = 0.2
"""Share of the task key space held out for evaluation (generated envs, single-split data)."""

BLOCK_SIZE = 64
"""Tasks generated per generator seed (before keeping the split's share)."""

_EVAL_SPLIT_NAMES = ("test", "validation")


def in_eval_split(key: str) -> bool:
    """Whether the task with content key `key` belongs to the eval split (a stable hash)."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < HOLDOUT_FRACTION


def _split_of(key: str) -> Split:
    return "eval" if in_eval_split(key) else "train"


# ---------------------------------------------------------------------------- task sources
@dataclass
class _GeneratedSource:
    """An env whose tasks come from `generate(n, seed)`; `key(task)` names the problem."""

    generate: Callable[[int, int], list[dict[str, Any]]]
    key: Callable[[dict[str, Any]], str]
    finite = False

    def block(self, split: Split, index: int, seed: int) -> list[dict[str, Any]]:
        generator_seed = 2 * (seed + index) + (1 if split == "eval" else 0)
        tasks = self.generate(BLOCK_SIZE, generator_seed)
        return [t for t in tasks if _split_of(self.key(t)) == split]


@dataclass
class _DatasetSource:
    """A finite list of tasks per split; block b is epoch b in a seeded shuffle."""

    name: str
    splits: dict[str, list[dict[str, Any]]]
    finite = True

    def block(self, split: Split, index: int, seed: int) -> list[dict[str, Any]]:
        tasks = list(self.splits[split])
        if not tasks:
            raise ValueError(f"dataset {self.name!r} has no {split!r} tasks")
        random.Random(f"{self.name}-{split}-{seed}-{index}").shuffle(tasks)
        return tasks


def _calculator(env_kwargs: dict[str, Any], dataset: str | None) -> _GeneratedSource:
    from envs.calculator.tasks import generate_tasks

    difficulty = int(env_kwargs.get("difficulty", 1))
    return _GeneratedSource(
        generate=lambda n, seed: generate_tasks(n, seed=seed, difficulty=difficulty),
        key=lambda task: "calculator:" + task["expression"].replace(" ", ""),
    )


def _frozen_lake(env_kwargs: dict[str, Any], dataset: str | None) -> _GeneratedSource:
    from envs.frozen_lake.env import generate_tasks

    size = int(env_kwargs.get("size", 4))
    p_frozen = float(env_kwargs.get("p_frozen", 0.8))
    return _GeneratedSource(
        generate=lambda n, seed: generate_tasks(n, seed=seed, size=size, p_frozen=p_frozen),
        key=lambda task: "frozen_lake:" + "/".join(task["map"]),
    )


def _code_exec(env_kwargs: dict[str, Any], dataset: str | None) -> _DatasetSource:
    dataset = dataset or env_kwargs.get("dataset")
    return _code_exec_splits(dataset)


@lru_cache(maxsize=8)
def _code_exec_splits(dataset: str | None) -> _DatasetSource:
    from envs.code_exec.env import DEFAULT_DATA
    from envs.code_exec.env import load_tasks as load_dataset_tasks

    train = load_dataset_tasks(dataset, "train")
    if dataset is not None and not os.path.exists(dataset):  # a hub dataset may have splits
        for name in _EVAL_SPLIT_NAMES:
            try:
                held_out = load_dataset_tasks(dataset, name)
            except (ValueError, KeyError):  # `datasets` refuses an unknown split
                continue
            return _DatasetSource(dataset, {"train": train, "eval": held_out})
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "eval": []}
    for task in train:
        splits[_split_of(f"code_exec:{task['task_id']}")].append(task)
    return _DatasetSource(dataset or DEFAULT_DATA, splits)


_SOURCES: dict[str, Callable[[dict[str, Any], str | None], Any]] = {
    "calculator": _calculator,
    "code_exec": _code_exec,
    "frozen_lake": _frozen_lake,
}
SUPPORTED_ENV_IDS = tuple(sorted(_SOURCES))


def _source(env_id: str, env_kwargs: dict[str, Any] | None, dataset: str | None) -> Any:
    if env_id not in _SOURCES and ":" in env_id:
        # A custom env ("module:Factory") names the task source it plays with `task_source`.
        import importlib

        module, _, attr = env_id.partition(":")
        factory = getattr(importlib.import_module(module), attr)
        env_id = getattr(factory, "task_source", env_id)
    if env_id not in _SOURCES:
        raise ValueError(
            f"no task source for env id {env_id!r}; supported env ids: "
            f"{', '.join(SUPPORTED_ENV_IDS)}"
        )
    return _SOURCES[env_id](dict(env_kwargs or {}), dataset)


def _check_split(split: str) -> None:
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")


# ---------------------------------------------------------------------------- public API
def load_tasks(
    env_id: str,
    split: Split,
    n: int,
    seed: int,
    env_kwargs: dict[str, Any] | None = None,
    dataset: str | None = None,
) -> list[dict[str, Any]]:
    """`n` tasks of `split` for `env_id`, the same for the same arguments.

    Generated envs give exactly `n` tasks (the first `n` a `TaskStream` with this seed yields,
    for "train"). Datasets give `min(n, len(split))` tasks in a seeded shuffle, without repeats.
    `env_kwargs` are the env's constructor arguments (the calculator reads `difficulty`);
    `dataset` names a hub dataset or a json/jsonl file for envs that take one (code_exec).
    """
    _check_split(split)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    source = _source(env_id, env_kwargs, dataset)
    if source.finite:
        return source.block(split, 0, seed)[:n]
    tasks: list[dict[str, Any]] = []
    index = 0
    while len(tasks) < n:
        tasks.extend(source.block(split, index, seed))
        index += 1
    return tasks[:n]


class TaskStream(Iterator[tuple[dict[str, Any], int]]):
    """An endless, deterministic stream of `(task, env_seed)` training pairs.

    Datasets: epoch after epoch over the train split, each epoch in its own seeded shuffle.
    Generated envs: fresh train tasks, one generator seed after another. `position` counts the
    pairs yielded; `state()` / `load_state(state)` resume at the same position.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any] | None = None,
        seed: int = 0,
        dataset: str | None = None,
    ) -> None:
        self.env_id = env_id
        self.seed = seed
        self.dataset = dataset
        self._source = _source(env_id, env_kwargs, dataset)
        self.position = 0
        self._block_index = 0
        self._offset = 0
        self._block: list[dict[str, Any]] | None = None

    def __iter__(self) -> TaskStream:
        return self

    def __next__(self) -> tuple[dict[str, Any], int]:
        while True:
            if self._block is None:
                self._block = self._source.block("train", self._block_index, self.seed)
            if self._offset < len(self._block):
                break
            self._block_index, self._offset, self._block = self._block_index + 1, 0, None
        task = dict(self._block[self._offset])
        env_seed = random.Random(f"env-seed-{self.seed}-{self.position}").randrange(2**31)
        self._offset += 1
        self.position += 1
        return task, env_seed

    @property
    def epoch(self) -> int:
        """Passes started over a dataset's train split (the generator seed index otherwise)."""
        return self._block_index

    def state(self) -> dict[str, Any]:
        """Where the stream is (JSON-able): save it with a checkpoint."""
        return {
            "env_id": self.env_id,
            "seed": self.seed,
            "dataset": self.dataset,
            "position": self.position,
            "block": self._block_index,
            "offset": self._offset,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from `state()` of a stream over the same env, seed and dataset."""
        for key in ("env_id", "seed", "dataset"):
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"TaskStream state is for {key}={state.get(key)!r}, this stream has "
                    f"{key}={getattr(self, key)!r}"
                )
        self.position = int(state["position"])
        self._block_index = int(state["block"])
        self._offset = int(state["offset"])
        self._block = None

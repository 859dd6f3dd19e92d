"""Tasks for training and evaluation: held-out splits and a resumable training stream.

    env = ResolvedEnv.of("calculator", kwargs={"difficulty": 1})
    held_out = load_tasks(env, "eval", n=64, seed=10_000)
    stream = TaskStream(env)                 # from env.config.train_seed
    task, env_seed = next(stream)          # endless, deterministic
    state = stream.state()                 # save with the checkpoint; `load_state` resumes

Where tasks come from: the env itself (see `forge_agent.env.Env` for the seam): a generator
`tasks(split, n, seed)` or a `dataset` (a hub dataset or a local json/jsonl/parquet/csv file,
renamed by a field mapping). The config's `env.dataset` / `env.fields` override the env's own.

How train and eval stay apart (no task is ever in both):
- generators keep their split's share of what they generate (`forge_agent.env.holdout`: a hash
  of a content key, e.g. the calculator's expression); the generator seeds differ too (even
  seeds for train, odd seeds for eval).
- datasets: a hub dataset's own "test" (or "validation") split is the eval split; data with a
  single split (a local file) is split by a hash of each task's key (`Dataset.key`).

Tasks come in blocks: block b of a generator is `tasks(split, BLOCK_SIZE, seed_b)`; block b of
a dataset is epoch b, the split's tasks in a seeded shuffle. A `TaskStream` walks the train
blocks in order, so its state is (block, offset) and resuming is O(one block).

Bad input fails here, before any actor starts, with an `EnvSetupError` naming the env id, the
source and what is missing: an env without tasks, a dataset file that does not exist, a task
lacking a field the env needs, an entry point that does not import.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.sources import (
    HOLDOUT_FRACTION,
    Dataset,
    EnvSetupError,
    Split,
    in_eval_split,
    load_dataset_splits,
    missing_fields,
)

__all__ = [
    "BLOCK_SIZE",
    "HOLDOUT_FRACTION",
    "Split",
    "TaskStream",
    "eval_tasks",
    "in_eval_split",
    "load_tasks",
    "task_source",
]

BLOCK_SIZE = 64
"""Tasks asked of a generator per seed (it may return fewer: its split's share)."""

MAX_EMPTY_BLOCKS = 64
"""Consecutive generator seeds without a task of the split before giving up."""


# ---------------------------------------------------------------------------- task sources
@dataclass
class _GeneratedSource:
    """An env whose tasks come from its `tasks(split, n, seed)`."""

    env_id: str
    env: Any
    required: tuple[str, ...]
    finite = False

    def describe(self) -> str:
        return f"{type(self.env).__name__}.tasks()"

    def block(self, split: Split, index: int, seed: int) -> list[dict[str, Any]]:
        generator_seed = 2 * (seed + index) + (1 if split == "eval" else 0)
        tasks = [dict(t) for t in self.env.tasks(split, BLOCK_SIZE, generator_seed)]
        for task in tasks:
            missing = missing_fields(task, self.required)
            if missing:
                raise EnvSetupError(
                    self.env_id,
                    self.describe(),
                    f"task {task.get('task_id', task)!r} lacks field(s) {', '.join(missing)} "
                    "that the env needs",
                )
        return tasks


@dataclass
class _DatasetSource:
    """A finite list of tasks per split; block b is epoch b in a seeded shuffle.

    The shuffle is keyed by the tasks (`order_key`, a digest of their keys), not by where the
    data lies: the same file copied to another folder (a clone, a temporary directory) gives
    the same order under the same seed."""

    env_id: str
    name: str
    splits: dict[str, list[dict[str, Any]]]
    order_key: str
    finite = True

    def describe(self) -> str:
        return f"dataset {self.name!r}"

    def block(self, split: Split, index: int, seed: int) -> list[dict[str, Any]]:
        tasks = list(self.splits[split])
        if not tasks:
            raise EnvSetupError(self.env_id, self.describe(), f"it has no {split!r} tasks")
        random.Random(f"{self.order_key}-{split}-{seed}-{index}").shuffle(tasks)
        return tasks


def _as_dataset(value: Any) -> Dataset:
    return value if isinstance(value, Dataset) else Dataset(value)


def task_source(env: ResolvedEnv) -> _GeneratedSource | _DatasetSource:
    """Where `env`'s tasks come from (its generator or dataset; the config's `dataset` and
    `fields` override the env's own dataset). Raises `EnvSetupError` when there is none."""
    env_id, spec, cfg = env.id, env.spec, env.config
    dataset, fields = cfg.dataset, cfg.fields
    factory = spec.factory()
    try:
        instance = env.make()
    except TypeError as exc:  # most often env.kwargs meant for another env
        raise EnvSetupError(
            env_id,
            f"entry point {spec.entry_point!r}",
            f"cannot be built with env.kwargs={cfg.kwargs}: {exc}",
        ) from exc
    required = tuple(getattr(instance, "required_fields", ()))
    declared = getattr(instance, "dataset", None)
    if dataset is not None or fields or (declared is not None and not _has_generator(instance)):
        if dataset is None and declared is None:
            raise EnvSetupError(
                env_id, f"{factory.__name__}", "env.fields is set but the env has no dataset"
            )
        base = _as_dataset(declared) if declared is not None else Dataset(dataset or "")
        data = dataclasses.replace(
            base,
            source=dataset if dataset is not None else base.source,
            fields={**base.fields, **dict(fields or {})},
        )
        splits = load_dataset_splits(data, env_id, required)
        name = data.source if isinstance(data.source, str) else f"{env_id}-tasks"
        keys = {split: [data.task_key(t) for t in tasks] for split, tasks in splits.items()}
        digest = hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]
        return _DatasetSource(env_id, name, splits, digest)
    if _has_generator(instance):
        return _GeneratedSource(env_id, instance, required)
    raise EnvSetupError(
        env_id,
        f"env class {getattr(factory, '__qualname__', factory)!r}",
        "it has no tasks: give the class a `tasks(split, n, seed)` generator or a `dataset`, "
        "or set env.dataset in the config",
    )


def _has_generator(env: Any) -> bool:
    return callable(getattr(env, "tasks", None))


def _check_split(split: str) -> None:
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")


def _nonempty_block(source: Any, split: Split, index: int, seed: int) -> tuple[int, list]:
    """The first block at or after `index` that has tasks, and its index (a generator may give
    none of a split for some seeds; too many in a row is an error)."""
    for k in range(index, index + MAX_EMPTY_BLOCKS):
        tasks = source.block(split, k, seed)
        if tasks:
            return k, tasks
    raise EnvSetupError(
        source.env_id,
        source.describe(),
        f"it gave no {split!r} tasks for {MAX_EMPTY_BLOCKS} seeds in a row",
    )


# ---------------------------------------------------------------------------- public API
def load_tasks(env: ResolvedEnv, split: Split, n: int, seed: int) -> list[dict[str, Any]]:
    """`n` tasks of `split` for `env` (its kwargs, dataset and fields), the same for the same
    arguments.

    Generated envs give exactly `n` tasks (the first `n` a `TaskStream` with this seed yields,
    for "train"). Datasets give `min(n, len(split))` tasks in a seeded shuffle, without repeats.
    """
    _check_split(split)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    source = task_source(env)
    if source.finite:
        return source.block(split, 0, seed)[:n]
    tasks: list[dict[str, Any]] = []
    index = 0
    while len(tasks) < n:
        index, block = _nonempty_block(source, split, index, seed)
        tasks.extend(block)
        index += 1
    return tasks[:n]


def eval_tasks(env: ResolvedEnv, n: int) -> list[dict[str, Any]]:
    """`n` held-out tasks of `env` (never in its training stream), from its `eval_seed`."""
    return load_tasks(env, "eval", n, env.config.eval_seed)


class TaskStream(Iterator[tuple[dict[str, Any], int]]):
    """An endless, deterministic stream of `(task, env_seed)` training pairs of `env` (its id,
    kwargs, dataset and `train_seed`).

    Datasets: epoch after epoch over the train split, each epoch in its own seeded shuffle.
    Generated envs: fresh train tasks, one generator seed after another. `position` counts the
    pairs yielded; `state()` / `load_state(state)` resume at the same position.
    """

    def __init__(self, env: ResolvedEnv) -> None:
        cfg = env.config
        self.env_id = cfg.id
        self.seed = cfg.train_seed
        self.dataset = cfg.dataset
        self._source = task_source(env)
        self.position = 0
        self._block_index = 0
        self._offset = 0
        self._block: list[dict[str, Any]] | None = None
        self._load_block()  # fails now, before training starts, if there are no tasks

    def _load_block(self) -> None:
        if self._source.finite:
            self._block = self._source.block("train", self._block_index, self.seed)
        else:
            self._block_index, self._block = _nonempty_block(
                self._source, "train", self._block_index, self.seed
            )

    def __iter__(self) -> TaskStream:
        return self

    def __next__(self) -> tuple[dict[str, Any], int]:
        while True:
            if self._block is None:
                self._load_block()
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

"""Where an env's tasks come from, and how they split into train and eval.

An env declares its tasks in one of two ways (see `forge_agent.env.protocol.Env`):

- a generator, `tasks(split, n, seed) -> list[task]`: up to `n` tasks of `split` made from
  `seed` (fewer is fine, e.g. after keeping the split's share with `holdout`);
- a `dataset`: a `Dataset` (or just its source string, or a list of task dicts): rows of a
  `datasets` hub dataset or of a local json/jsonl/parquet/csv file, renamed by a field mapping.

Split rule for data without a held-out split: a stable hash of each task's key puts a fixed
`HOLDOUT_FRACTION` of the key space in "eval" and the rest in "train", so no problem is ever in
both, whatever the seeds or counts. A hub dataset with a "test" (or "validation") split uses
that split for eval instead.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from forge_agent.errors import SetupError

__all__ = [
    "HOLDOUT_FRACTION",
    "Dataset",
    "EnvSetupError",
    "Split",
    "holdout",
    "in_eval_split",
    "load_dataset_splits",
    "missing_fields",
]

Split = Literal["train", "eval"]

HOLDOUT_FRACTION = 0.2
"""Share of the task key space held out for evaluation (generated envs, single-split data)."""

_EVAL_SPLIT_NAMES = ("test", "validation")
_FILE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


class EnvSetupError(SetupError, ValueError):
    """An env cannot be set up for training: names the env id, the source and what is missing."""

    def __init__(self, env_id: str, source: str, problem: str) -> None:
        super().__init__(f"env {env_id!r} (source: {source}): {problem}")
        self.env_id, self.source, self.problem = env_id, source, problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.env_id, self.source, self.problem))


def in_eval_split(key: str) -> bool:
    """Whether the task with content key `key` belongs to the eval split (a stable hash)."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < HOLDOUT_FRACTION


def holdout(
    tasks: Sequence[dict[str, Any]], split: Split, key: Callable[[dict[str, Any]], str]
) -> list[dict[str, Any]]:
    """The tasks of `split`: `key(task)` names the problem, its hash picks the split."""
    want_eval = split == "eval"
    return [t for t in tasks if in_eval_split(key(t)) == want_eval]


@dataclass(frozen=True)
class Dataset:
    """An env's tasks as rows of data.

    Args:
        source: a `datasets` hub name, a local .json/.jsonl/.parquet/.csv file (optionally
            .gz), or the task dicts themselves.
        fields: task field -> the column it comes from, or a template over the row's columns
            (`"{prompt}{canonical_solution}"`); unmapped columns are kept under their names.
        key: the field whose value names a problem for the hash split (or a function of the
            task); used when the data has no held-out split of its own.
        split: the hub split to train on.
        eval_source: held-out task dicts of a list `source` (e.g. an ecosystem's own eval
            dataset); without them the hash of `key` splits the source.
    """

    source: str | Sequence[dict[str, Any]]
    fields: Mapping[str, str] = field(default_factory=dict)
    key: str | Callable[[dict[str, Any]], str] = "task_id"
    split: str = "train"
    eval_source: Sequence[dict[str, Any]] | None = None

    def describe(self) -> str:
        if isinstance(self.source, str):
            return f"dataset {self.source!r}"
        return f"a list of {len(self.source)} tasks"

    def task_key(self, task: dict[str, Any]) -> str:
        if callable(self.key):
            return self.key(task)
        if self.key in task:
            return str(task[self.key])
        return json.dumps(task, sort_keys=True, default=str)


def missing_fields(task: dict[str, Any], required: Sequence[str]) -> list[str]:
    """The entries of `required` that `task` lacks; `"a|b"` is satisfied by either field."""
    return [
        name for name in required if not any(task.get(alt) is not None for alt in name.split("|"))
    ]


def _file_format(path: str) -> str | None:
    stem = path[:-3] if path.endswith(".gz") else path
    return _FILE_FORMATS.get(os.path.splitext(stem)[1])


def _looks_like_path(source: str) -> bool:
    return _file_format(source) is not None or source.startswith((".", "/", "~"))


@lru_cache(maxsize=16)
def _read_rows(source: str, split: str) -> tuple[dict[str, Any], ...]:
    import datasets  # slow to import: only when data is read

    path = os.path.expanduser(source)
    if _looks_like_path(source):
        fmt = _file_format(path) or "json"
        rows = datasets.load_dataset(fmt, data_files=path, split=split)
    else:
        rows = datasets.load_dataset(source, split=split)
    return tuple(dict(row) for row in rows)


def _map_fields(
    row: dict[str, Any], fields: Mapping[str, str], where: str, error: Callable[[str], Exception]
) -> dict[str, Any]:
    task = dict(row)
    for name, spec in fields.items():
        try:
            task[name] = spec.format(**row) if "{" in spec else row[spec]
        except KeyError as exc:
            columns = ", ".join(sorted(row))
            raise error(
                f"field mapping {name}={spec!r} names column {exc.args[0]!r}, which {where} "
                f"lacks (columns: {columns})"
            ) from None
    return task


def load_dataset_splits(
    dataset: Dataset, env_id: str, required: Sequence[str] = ()
) -> dict[str, list[dict[str, Any]]]:
    """{"train": tasks, "eval": tasks} of `dataset`, fields mapped and checked.

    Raises `EnvSetupError` (naming env id, source and what is missing) for a missing file, an
    empty dataset, a mapping that names an absent column, or a task lacking a `required` field.
    """
    where = dataset.describe()

    def error(problem: str) -> EnvSetupError:
        return EnvSetupError(env_id, where, problem)

    held_out: list[dict[str, Any]] | None = None
    if isinstance(dataset.source, str):
        source = dataset.source
        if _looks_like_path(source) and not os.path.exists(os.path.expanduser(source)):
            raise error(f"file {source!r} does not exist")
        try:
            rows = list(_read_rows(source, dataset.split))
        except FileNotFoundError as exc:
            raise error(f"could not read it ({exc})") from exc
        except ConnectionError as exc:  # a hub dataset, offline and not in the local cache
            raise error(
                f"could not read it ({exc}); a hub dataset needs the network or a copy in the "
                "local Hugging Face datasets cache, or give env.dataset a local file"
            ) from exc
        if not _looks_like_path(source):  # a hub dataset may have a held-out split
            for name in _EVAL_SPLIT_NAMES:
                try:
                    held_out = list(_read_rows(source, name))
                    break
                except (ValueError, KeyError):  # `datasets` refuses an unknown split
                    continue
    else:
        rows = [dict(row) for row in dataset.source]
        if dataset.eval_source is not None:
            held_out = [dict(row) for row in dataset.eval_source]
    if not rows:
        raise error("it has no tasks")

    def prepare(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        tasks = []
        for i, row in enumerate(batch):
            task = _map_fields(row, dataset.fields, f"row {i}", error)
            missing = missing_fields(task, required)
            if missing:
                name = task.get("task_id", f"row {i}")
                raise error(
                    f"task {name!r} lacks field(s) {', '.join(missing)} that the env needs "
                    f"(it has: {', '.join(sorted(task))}; map columns with env.fields)"
                )
            tasks.append(task)
        return tasks

    tasks = prepare(rows)
    if held_out is not None:
        return {"train": tasks, "eval": prepare(held_out)}
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "eval": []}
    for task in tasks:
        splits["eval" if in_eval_split(dataset.task_key(task)) else "train"].append(task)
    return splits

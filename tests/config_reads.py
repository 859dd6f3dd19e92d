"""Records which fields of a config tree code reads (for the dead-key test).

`record_reads(cfg)` patches `__getattribute__` of every dataclass type in the tree for the
duration of a `with` block and notes each read of a field of one of the tree's instances, by
its dotted path. `paused()` suspends recording (e.g. while the whole config is dumped to YAML).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any


class ReadRecorder:
    def __init__(self, cfg: Any) -> None:
        self.paths: dict[int, str] = {}
        self.fields: dict[int, set[str]] = {}
        self.instances: list[Any] = []  # kept alive so ids stay unique
        self.reads: set[str] = set()
        self.active = True
        self._walk(cfg, "")

    def _walk(self, obj: Any, path: str) -> None:
        self.paths[id(obj)] = path
        self.fields[id(obj)] = {f.name for f in dataclasses.fields(obj)}
        self.instances.append(obj)
        for f in dataclasses.fields(obj):
            value = object.__getattribute__(obj, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                self._walk(value, f"{path}{f.name}.")

    def leaves(self) -> set[str]:
        """Every field path of the tree that is not itself a section."""
        out = set()
        for obj in self.instances:
            for name in self.fields[id(obj)]:
                value = object.__getattribute__(obj, name)
                if not (dataclasses.is_dataclass(value) and not isinstance(value, type)):
                    out.add(self.paths[id(obj)] + name)
        return out

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.active = False
        try:
            yield
        finally:
            self.active = True


@contextlib.contextmanager
def record_reads(cfg: Any) -> Iterator[ReadRecorder]:
    recorder = ReadRecorder(cfg)
    types = {type(obj) for obj in recorder.instances}
    saved = {t: t.__dict__.get("__getattribute__") for t in types}

    def make(original):
        def __getattribute__(self, name):
            key = id(self)
            if recorder.active and name in recorder.fields.get(key, ()):
                recorder.reads.add(recorder.paths[key] + name)
            return original(self, name)

        return __getattribute__

    for t in types:
        t.__getattribute__ = make(t.__getattribute__)
    try:
        yield recorder
    finally:
        for t, original in saved.items():
            if original is None:
                del t.__getattribute__
            else:
                t.__getattribute__ = original

"""Lazy package attributes (PEP 562): a package names what it exports without importing the
heavy modules (torch, vLLM, Monarch) that define them until one is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for `package` that imports ``where[name]`` (a module
    path) on first access of ``name``."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__


class LazyModule:
    """A module imported on first attribute access: ``torch = LazyModule("torch")`` at the top
    of a module the driver imports for its classes and never runs on tensors (the weight
    store's actor and client): importing torch costs 0.15 GB of PSS there (measured)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"

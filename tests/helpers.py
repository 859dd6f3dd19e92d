"""Helpers shared by test modules."""

from __future__ import annotations

from typing import Any


def spawn_test_procs(n: int) -> Any:
    """A Monarch proc mesh of `n` local processes (stop it with `.stop().get()`)."""
    from monarch.actor import this_host

    return this_host().spawn_procs(per_host={"procs": n})

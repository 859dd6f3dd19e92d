"""Helpers shared by test modules."""

from __future__ import annotations

import os
from typing import Any

from monarch.actor import Actor, endpoint


def spawn_test_procs(n: int) -> Any:
    """A Monarch proc mesh of `n` local processes (stop it with `.stop().get()`)."""
    from monarch.actor import this_host

    return this_host().spawn_procs(per_host={"procs": n})


class VisibleDevices(Actor):
    """Reports its proc's CUDA_VISIBLE_DEVICES (an actor here, not in a test module, so procs
    can unpickle it by an importable module name)."""

    @endpoint
    async def devices(self) -> str | None:
        return os.environ.get("CUDA_VISIBLE_DEVICES")

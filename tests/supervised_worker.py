"""An actor for tests/test_supervision.py (actors must live in a module their procs import)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from monarch.actor import Actor, endpoint


class Worker(Actor):
    """Starts a child process at setup, as the vLLM generator does."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None

    @endpoint
    async def setup(self) -> None:
        self.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    @endpoint
    async def pids(self) -> tuple[int, int]:
        assert self.child is not None
        return os.getpid(), self.child.pid

    @endpoint
    async def slow(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @endpoint
    async def fail(self) -> None:
        raise ValueError("an ordinary endpoint error")

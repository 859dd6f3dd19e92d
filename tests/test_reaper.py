"""The vLLM reaper: kills the engine's processes once their owner dies, and stays small."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from forge_agent.generator import reaper


def test_reaper_kills_the_targets_when_the_owner_dies_and_never_imports_torch():
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    target = subprocess.Popen(["sleep", "60"])
    created = psutil.Process(target.pid).create_time()
    watch = subprocess.Popen(
        [sys.executable, reaper.__file__, str(owner.pid), f"{target.pid}:{created}"]
    )
    try:
        maps, deadline = "", time.monotonic() + 10
        while "psutil" not in maps and time.monotonic() < deadline:  # up and waiting
            maps = Path(f"/proc/{watch.pid}/maps").read_text()
        assert "psutil" in maps and "libtorch" not in maps and watch.poll() is None
        owner.kill()
        owner.wait()
        assert watch.wait(timeout=10) == 0
        assert target.wait(timeout=10) == -9
    finally:
        for proc in (owner, target, watch):
            if proc.poll() is None:
                proc.kill()

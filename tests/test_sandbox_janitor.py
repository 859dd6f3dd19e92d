"""The janitor removes what a process killed in the middle of making a sandbox leaves: an env
worker serves several envs on threads, so a kill (a timed-out or crashing env) can land between
any two lines of another env's sandbox setup."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(60)

KILLED_AFTER_MKDIR = """
import os, signal, sys
from forge_agent.sandbox.workspace import Workspace

real_mkdir = os.mkdir

def mkdir_then_die(path, mode=0o777, **kw):
    real_mkdir(path, mode, **kw)
    if os.path.basename(path).startswith("forge-ws-"):
        print(path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

os.mkdir = mkdir_then_die
Workspace(size_mb=1, max_files=16, root=sys.argv[1])
"""


def test_a_workspace_whose_process_dies_right_after_making_its_folder_is_removed(tmp_path):
    child = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_MKDIR, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert child.returncode == -9, child.stderr[-2000:]
    made = child.stdout.strip()
    assert made.startswith(str(tmp_path / "forge-ws-")), child.stdout
    deadline = time.monotonic() + 10
    while list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.iterdir()) == []

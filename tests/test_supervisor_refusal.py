"""The in-sandbox supervisor runs requests only inside a sandbox: after each run it SIGKILLs
every process it can signal, which on a host run as root is every process of the machine.

The runs of the supervisor here are isolated themselves: each is a child of its own PID
namespace (``unshare --pid --fork --mount-proc``), so even a supervisor whose refusal failed
could signal nothing outside it."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_agent.sandbox import supervisor
from forge_agent.sandbox.base import Limits
from forge_agent.sandbox.docker import DockerSandbox
from forge_agent.sandbox.supervisor_host import SUPERVISOR_SOURCE

ISOLATED = ["unshare", "--pid", "--fork", "--mount-proc"]
if os.geteuid() != 0:  # a PID namespace needs a user namespace of its own without root
    ISOLATED.insert(1, "--map-root-user")

# Run by sh as PID 1 of the new namespace: stop unless /proc shows that namespace alone, then
# start the supervisor as PID 2 ($3 = "child") or as PID 1 itself ($3 = "exec").
HARNESS = (
    'n=$(ls -d /proc/[0-9]* | wc -l); if [ "$n" -gt 4 ]; then '
    'echo "not isolated: $n processes visible" >&2; exit 99; fi; '
    'if [ "$3" = exec ]; then exec "$0" -I -c "$1" oneshot "$2"; fi; '
    '"$0" -I -c "$1" oneshot "$2"; status=$?; exit $status'
)


def test_pid_1_of_its_own_namespace_may_run_requests() -> None:
    assert supervisor.refusal(1, []) is None


def test_a_docker_exec_beside_the_sessions_keepalive_may_run_requests() -> None:
    keepalive = DockerSandbox.supervisor_command(
        SimpleNamespace(python="/usr/bin/python3"), "keepalive"
    )
    assert supervisor.refusal(7, keepalive) is None


def test_a_process_on_a_host_may_not_and_is_told_why() -> None:
    why = supervisor.refusal(4242, ["/sbin/init", "splash"])
    assert why is not None
    assert "outside a sandbox" in why and "pid 4242" in why and "/sbin/init splash" in why


def _isolated_oneshot(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run the supervisor's oneshot on a request that writes a marker file, in a PID namespace
    of its own (`how`: "child" runs it as PID 2, "exec" as PID 1)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare")
    probe = subprocess.run([*ISOLATED, "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {probe.stderr.decode().strip()}")
    marker = tmp_path / "ran"
    request = tmp_path / "request.json"
    code = f"open({str(marker)!r}, 'w').close(); print('ran')"
    request.write_text(json.dumps({"id": 1, "code": code, "limits": Limits().to_dict()}))
    command = [*ISOLATED, "sh", "-c", HARNESS, sys.executable, SUPERVISOR_SOURCE, str(request)]
    done = subprocess.run([*command, how], capture_output=True, text=True, timeout=60)
    assert done.returncode != 99, done.stderr  # the harness saw more than its own namespace
    return done, marker


def test_oneshot_outside_a_sandbox_refuses_before_running_anything(tmp_path: Path) -> None:
    done, marker = _isolated_oneshot(tmp_path, "child")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "supervisor oneshot: refusing to run requests outside a sandbox" in done.stderr
    assert done.stdout == ""
    assert not marker.exists()


def test_oneshot_as_pid_1_of_its_own_namespace_still_runs(tmp_path: Path) -> None:
    done, marker = _isolated_oneshot(tmp_path, "exec")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["exit_code"] == 0, reply
    assert base64.b64decode(reply["stdout_b64"]) == b"ran\n"
    assert marker.exists()

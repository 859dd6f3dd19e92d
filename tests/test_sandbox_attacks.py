"""Hostile code against every sandbox backend: each attack is contained, reported in the
RunResult, leaves the host unchanged, and the next call works.

Each attack runs twice per backend: in a fresh one-shot sandbox and inside a session (the
warm path an episode uses), whose next run must still work.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from forge_agent.sandbox import Limits, RunResult, Sandbox, SandboxSession

try:
    from sandbox_fixtures import (
        any_sandbox,
        bwrap_sandbox,
        docker_engine,
        docker_sandbox,
        sandbox_processes,
    )
except ImportError:  # tests/ is a package
    from tests.sandbox_fixtures import (  # noqa: F401
        any_sandbox,
        bwrap_sandbox,
        docker_engine,
        docker_sandbox,
        sandbox_processes,
    )

FAST = Limits(wall_s=3.0, cpu_s=3.0)


@pytest.fixture(params=["oneshot", "session"])
def runner(request: pytest.FixtureRequest, any_sandbox: Sandbox) -> Iterator[object]:
    """A callable running code the way the parametrized mode does; checks the next call works."""
    session: SandboxSession | None = None
    if request.param == "session":
        session = any_sandbox.session()

    def run(**kwargs: object) -> RunResult:
        target = session if session is not None else any_sandbox
        return target.run(**kwargs)  # type: ignore[arg-type]

    run.session = session  # type: ignore[attr-defined]
    yield run
    target = session if session is not None else any_sandbox
    after = target.run(code="print('still works')", limits=FAST)
    assert after.stdout == "still works\n", after
    if session is not None:
        session.close()


def test_host_secrets_are_unreadable(runner) -> None:
    code = (
        "import os\n"
        "for path in ('/etc/shadow', '/root/.bashrc', '/root/.ssh/id_rsa'):\n"
        "    try:\n"
        "        print('READ', path, len(open(path).read()))\n"
        "    except OSError as e:\n"
        "        print('denied', path, type(e).__name__)\n"
        "try:\n"
        "    print('LISTED /root', os.listdir('/root'))\n"
        "except OSError as e:\n"
        "    print('denied /root', type(e).__name__)\n"
    )
    result = runner(code=code, limits=FAST)
    assert result.exit_code == 0, result
    assert "READ" not in result.stdout and "LISTED" not in result.stdout, result.stdout
    assert result.stdout.count("denied") == 4


def test_writes_outside_the_workspace_fail_and_host_is_unchanged(runner, tmp_path) -> None:
    host_target = tmp_path / "host-file.txt"
    code = (
        "targets = ['/usr/pwned', '/etc/pwned', '/pwned', '/root/pwned', HOST, '/proc/pwned']\n"
        "for path in targets:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as e:\n"
        "        print('denied', path)\n"
        "open('/workspace/inside.txt', 'w').write('fine')\n"
        "open('/tmp/scratch.txt', 'w').write('fine')\n"
    ).replace("HOST", repr(str(host_target)))
    result = runner(code=code, limits=FAST)
    assert result.exit_code == 0, result
    assert "WROTE" not in result.stdout, result.stdout
    assert not host_target.exists()
    for path in ("/usr/pwned", "/etc/pwned", "/pwned", "/root/pwned"):
        assert not os.path.exists(path), path


def test_loopback_to_the_host_is_unreachable(runner) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "    print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('blocked', type(e).__name__)\n"
    )
    try:
        result = runner(code=code, limits=FAST)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert result.stdout.startswith("blocked"), result


def test_external_network_is_unreachable(runner) -> None:
    code = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=1)\n"
        "    print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('blocked', type(e).__name__)\n"
    )
    result = runner(code=code, limits=FAST)
    assert result.stdout.startswith("blocked"), result


def test_fork_bomb_is_contained(runner) -> None:
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    start = time.monotonic()
    result = runner(code=code, limits=Limits(wall_s=2.0, cpu_s=2.0, max_procs=16))
    assert result.timed_out, result
    assert time.monotonic() - start < 2.0 + 6.0


def test_ten_gib_allocation_reports_oom(runner) -> None:
    result = runner(code="x = bytearray(10 * 1024**3)\nprint('ALLOCATED')", limits=FAST)
    assert "ALLOCATED" not in result.stdout
    assert result.oom, result
    assert not result.ok


def test_gradual_allocation_reports_oom(runner) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(32 * 1024 * 1024))\n"
    result = runner(code=code, limits=Limits(wall_s=5.0, memory_mb=256))
    assert result.oom, result


def test_two_gib_file_is_cut_at_the_file_size_limit(runner) -> None:
    code = (
        "chunk = b'0' * (1 << 20)\n"
        "with open('big.bin', 'wb') as f:\n"
        "    for _ in range(2048):\n"
        "        f.write(chunk)\n"
        "print('WROTE 2GiB')\n"
    )
    result = runner(code=code, limits=Limits(wall_s=5.0, file_size_mb=8))
    assert "WROTE 2GiB" not in result.stdout
    assert result.exit_code != 0 and "File too large" in result.stderr, result
    if runner.session is not None:
        assert os.path.getsize(os.path.join(runner.session.workspace, "big.bin")) <= 8 << 20


def test_infinite_loop_times_out(runner) -> None:
    start = time.monotonic()
    result = runner(code="while True:\n    pass\n", limits=Limits(wall_s=1.5, cpu_s=10))
    elapsed = time.monotonic() - start
    assert result.timed_out and result.signal == 9 and result.exit_code is None, result
    assert elapsed < 1.5 + 3.0


def test_cpu_limit_stops_a_busy_loop(runner) -> None:
    result = runner(code="while True:\n    pass\n", limits=Limits(wall_s=10, cpu_s=1))
    assert result.timed_out, result
    # The CPU-time limit, not the wall clock, ended it (wall time depends on machine load).
    assert result.signal == 24, result  # SIGXCPU


def test_hundred_megabytes_of_stdout_is_truncated(runner) -> None:
    code = "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))\n"
    result = runner(code=code, limits=Limits(wall_s=10, output_bytes=10_000))
    assert result.truncated, result.describe()
    assert result.stdout == "x" * 10_000
    assert result.exit_code == 0


def test_setsid_daemon_dies_with_the_run(runner) -> None:
    token = f"forge-daemon-{uuid.uuid4().hex}"
    code = (
        "import subprocess\n"
        "script = 'sleep 2; echo pwned > /workspace/TOKEN'\n"
        "subprocess.Popen(['setsid', 'sh', '-c', script, 'TOKEN'], start_new_session=True)\n"
        "import os\n"
        "if os.fork() == 0:\n"  # a pure-Python double-forked daemon holding stdout open
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        import time\n"
        "        time.sleep(2)\n"
        "        open('/workspace/TOKEN.py', 'w').write('pwned')\n"
        "    os._exit(0)\n"
        "print('spawned', flush=True)\n"
    ).replace("TOKEN", token)
    start = time.monotonic()
    result = runner(code=code, limits=FAST)
    assert result.stdout == "spawned\n", result
    assert time.monotonic() - start < 3.0, "the run waited for the daemon's pipes"
    assert sandbox_processes(token) == []
    if runner.session is not None:
        time.sleep(2.5)
        for name in (token, token + ".py"):
            assert not os.path.exists(os.path.join(runner.session.workspace, name))


def test_killing_the_parent_is_contained(runner) -> None:
    result = runner(code="import os\nos.kill(os.getppid(), 9)\nprint('after')", limits=FAST)
    # Under bubblewrap the supervisor is the PID namespace's init and ignores the signal; under
    # Docker it dies and the result says so (the container is replaced for the next run).
    assert result.stdout == "after\n" or result.stderr.startswith("[sandbox]"), result


def test_kill_minus_one_is_contained(runner) -> None:
    result = runner(argv=["/bin/sh", "-c", "kill -9 -1; echo after"], limits=FAST)
    assert result.stdout == "after\n" or result.stderr.startswith("[sandbox]"), result

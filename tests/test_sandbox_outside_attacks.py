"""What the second outside attack run found (issue 24), each attack done as an attacker does it.

- A spawned container swapping folders of the reply folder for symlinks to host folders, so
  that the host's cleanup before each run deletes host files (Docker).
- `network=True` on bwrap reaching a listener on the host's loopback.
- Code lowering its supervisor's limits with ``prlimit`` so that the run ends as an excluded
  infrastructure failure instead of the code's own (both backends).
- The low findings: output at a raised ``output_bytes`` limit reported as a hang or a dead
  container (both backends); code that SIGSTOPs its supervisor running past ``wall_s``
  (Docker; bwrap's supervisor is its namespace's init, which code cannot stop); a file path
  of a lone surrogate writing a file of undecodable name (both backends).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from forge_agent.sandbox import Limits, Sandbox, SandboxError
from tests.helpers import host_victim, host_victim_intact

try:
    from sandbox_fixtures import (
        any_sandbox,
        bwrap_sandbox,
        docker_engine,
        docker_sandbox,
        unfiltered_prlimit,
    )
except ImportError:  # tests/ is a package
    from tests.sandbox_fixtures import (  # noqa: F401
        any_sandbox,
        bwrap_sandbox,
        docker_engine,
        docker_sandbox,
        unfiltered_prlimit,
    )

pytestmark = pytest.mark.timeout(120)

FAST = Limits(wall_s=5.0, cpu_s=5.0)


REPLY_SWAPPER = r"""
import os, sys, time
victim = sys.argv[1]
print("reply folder visible" if os.path.isdir("/.forge-out") else "no reply folder", flush=True)
end = time.monotonic() + 30
while os.path.isdir("/.forge-out") and time.monotonic() < end:
    for k in range(3):
        sub, real = f"/.forge-out/sub{k}", f"/.forge-out/real{k}"
        try:
            os.makedirs(sub, exist_ok=True)
            open(sub + "/f", "w").close()
            os.rename(sub, real)
            os.symlink(victim, sub)
            os.unlink(sub)
            os.rename(real, sub)
        except OSError:
            pass
"""


def test_a_spawned_container_cannot_plant_links_in_the_reply_folder(
    docker_sandbox: Sandbox, tmp_path: Path
) -> None:
    victim = host_victim(tmp_path)
    with docker_sandbox.session(FAST) as session:
        proc = session.spawn(["python3", "-c", REPLY_SWAPPER, str(victim)])
        assert proc.stdout is not None
        seen = proc.stdout.readline().decode().strip()
        for _ in range(20):  # each run clears the reply folder on the host first
            assert session.run(code="print('ok')").stdout == "ok\n"
        proc.kill()
    assert seen == "no reply folder"
    assert host_victim_intact(victim), sorted(p.name for p in victim.iterdir())


def test_network_on_bwrap_is_refused_and_never_reaches_the_host_loopback(
    bwrap_sandbox: Sandbox,
) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    reached = threading.Event()
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            reached.set()
            conn.close()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    code = (
        "import socket\n"
        f"socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
        "print('connected to the host')\n"
    )
    try:
        with pytest.raises(SandboxError, match=r"network=True.*refused.*host's network namespace"):
            bwrap_sandbox.run(code=code, limits=FAST.with_(network=True))
        with pytest.raises(SandboxError, match="refused"):
            bwrap_sandbox.session(FAST.with_(network=True))
        without = bwrap_sandbox.run(code=code, limits=FAST)  # the default: no network at all
        assert "connected" not in without.stdout and without.exit_code != 0, without
    finally:
        stop.set()
        acceptor.join(timeout=5)
        listener.close()
    assert not reached.is_set()


LOWER_THE_SUPERVISORS_LIMITS = r"""
import os, resource
others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
for pid in others:  # the supervisor (on bwrap PID 1), Docker's keep-alive, a checker
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (1 << 20, 1 << 20))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (4, 4))
        print("lowered", pid)
    except OSError as exc:
        print("refused", pid, exc.errno)
os.write(2, b"x" * 200_000)  # the supervisor must now allocate to read this
"""


def test_code_cannot_lower_its_supervisors_limits(any_sandbox: Sandbox) -> None:
    with any_sandbox.session(FAST) as session:
        result = session.run(code=LOWER_THE_SUPERVISORS_LIMITS)
        assert "lowered" not in result.stdout, result.stdout
        assert result.stdout.count("refused") >= 1 and result.exit_code == 0, result
        assert session.run(code="print('next')").stdout == "next\n"


def test_a_supervisor_starved_by_the_code_is_the_codes_failure(
    any_sandbox: Sandbox, unfiltered_prlimit: None
) -> None:
    with any_sandbox.session(FAST) as session:
        result = session.run(code=LOWER_THE_SUPERVISORS_LIMITS)  # no SandboxError
        assert not result.ok and "lowered" not in result.stderr, result
        assert "counted as the code's failure" in result.stderr, result.stderr
        assert "not hardened" not in result.stderr
        assert session.run(code="print('next')").stdout == "next\n"  # a fresh supervisor


STARVING_SOLUTION = LOWER_THE_SUPERVISORS_LIMITS + "\ndef add_one(x):\n    return x\n"


def test_grading_a_solution_that_starves_its_supervisor_scores_zero(
    any_sandbox: Sandbox, unfiltered_prlimit: None
) -> None:
    from envs.code_exec.grading import grade

    result = grade(STARVING_SOLUTION, "add_one", [{"args": [1], "expected": 2}], any_sandbox)
    assert result.passed == 0 and result.total == 1, result


BIG_OUTPUT = r"""
import sys
sys.stdout.buffer.write(b"\x00" * (SIZE - 3) + b"end")  # JSON's worst case: 6 bytes per byte
sys.stdout.flush()
sys.stderr.buffer.write(b"\xff" * SIZE)  # undecodable: each byte one U+FFFD
"""


def test_output_up_to_a_raised_limit_comes_back_whole(any_sandbox: Sandbox) -> None:
    n = 8_000_000
    limits = FAST.with_(output_bytes=n)
    code = BIG_OUTPUT.replace("SIZE", str(n))
    with any_sandbox.session(limits) as session:
        for result in (session.run(code=code), any_sandbox.run(code=code, limits=limits)):
            assert result.exit_code == 0 and not result.truncated, result.stderr[:300]
            assert len(result.stdout) == n and result.stdout.endswith("end")
            assert result.stderr == "\ufffd" * n
            assert result.duration_s < 4, result.duration_s
        more = session.run(code=code.replace("end", "end!"))  # 1 byte over: kept up to n
        assert more.truncated and len(more.stdout) == n, more.stderr[:300]


def test_an_output_limit_over_the_maximum_is_refused_naming_it() -> None:
    from forge_agent.sandbox.base import MAX_OUTPUT_BYTES

    most = MAX_OUTPUT_BYTES
    refused = rf"Limits.output_bytes must be at most {most}\b.*got {most + 1}"
    with pytest.raises(ValueError, match=refused):
        Limits(output_bytes=MAX_OUTPUT_BYTES + 1)
    assert Limits(output_bytes=MAX_OUTPUT_BYTES).output_bytes == MAX_OUTPUT_BYTES


STOP_THE_SUPERVISOR = r"""
import os, signal, time
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGSTOP)  # the supervisor (our parent) among them
        except OSError:
            pass
while True:  # how long the code ran, in the workspace (the host's clock: the same kernel)
    with open("alive.tmp", "w") as f:
        f.write(str(time.time()))
    os.replace("alive.tmp", "alive")
    time.sleep(0.05)
"""


def test_code_that_stops_its_supervisor_still_ends_at_its_wall_time(
    any_sandbox: Sandbox,
) -> None:
    wall_s = 2.0
    with any_sandbox.session(FAST.with_(wall_s=wall_s)) as session:
        session.write_file("alive", "0")
        before = time.time()
        result = session.run(code=STOP_THE_SUPERVISOR)
        last = float(session.read_file("alive"))
        assert result.timed_out and not result.ok, result
        assert before < last < before + wall_s + 1.5, (last - before, result.stderr)
        time.sleep(0.5)
        assert float(session.read_file("alive")) == last  # nothing runs after the answer
        assert session.run(code="print('next')").stdout == "next\n"


def test_a_lone_surrogate_path_is_refused_naming_it(any_sandbox: Sandbox) -> None:
    from tools.files import read_file, write_file

    path = "notes/\udcff.txt"  # what json.loads makes of "notes/\\udcff.txt" in a tool call
    refused = r"path 'notes/\\udcff.txt' is not valid Unicode text"
    with any_sandbox.session(FAST) as session:
        reply = write_file(path, "x", sandbox=session)
        assert reply.startswith("Error: ") and "'notes/\\udcff.txt'" in reply, reply
        assert read_file(path, sandbox=session).startswith("Error: path 'notes/\\udcff.txt'")
        with pytest.raises(ValueError, match=refused):
            session.write_file(path, "x")
        with pytest.raises(ValueError, match=refused):
            session.run(code="print(1)", files={path: "x"})
        with pytest.raises(ValueError, match=refused):
            any_sandbox.run(code="print(1)", files={path: "x"}, limits=FAST)
        assert list(Path(session.workspace).rglob("*")) == []  # nothing written

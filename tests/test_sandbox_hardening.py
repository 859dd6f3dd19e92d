"""Attacks an outside attack run found (issue 12), on both backends, one-shot and in a session:
taking over the supervisor or keep-alive, hardening that silently fails, imports from the
workspace, deep trees against teardown, large one-shot replies, workspace quotas and the
host-wide memory budget.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from forge_agent.sandbox import Limits, RunResult, Sandbox, SandboxError, SandboxSession, admission

try:
    from sandbox_fixtures import any_sandbox, bwrap_sandbox, docker_engine, docker_sandbox
except ImportError:  # tests/ is a package
    from tests.sandbox_fixtures import (  # noqa: F401
        any_sandbox,
        bwrap_sandbox,
        docker_engine,
        docker_sandbox,
    )

FAST = Limits(wall_s=5.0, cpu_s=5.0)
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="workspace quotas need root (one tmpfs per workspace)"
)


@pytest.fixture(params=["oneshot", "session"])
def runner(request: pytest.FixtureRequest, any_sandbox: Sandbox) -> Iterator[object]:
    """Runs code the parametrized way; afterwards the next call must still work."""
    session: SandboxSession | None = any_sandbox.session() if request.param == "session" else None

    def run(**kwargs: object) -> RunResult:
        return (session or any_sandbox).run(**kwargs)  # type: ignore[arg-type]

    run.session = session  # type: ignore[attr-defined]
    yield run
    after = (session or any_sandbox).run(code="print('still works')", limits=FAST)
    assert after.stdout == "still works\n", after
    if session is not None:
        session.close()


REACH_OTHERS = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)

class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

me = os.getpid()
others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
reached = []
for pid in others:
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        reached.append(f"ptrace {pid}")
    buf = ctypes.create_string_buffer(8)
    local, remote = IOVec(ctypes.cast(buf, ctypes.c_void_p), 8), IOVec(0x400000, 8)
    rc = libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if rc >= 0 or ctypes.get_errno() != errno.EPERM:
        reached.append(f"process_vm_writev {pid} errno {ctypes.get_errno()}")
    for path in (f"/proc/{pid}/mem", f"/proc/{pid}/fd/1"):
        try:
            os.close(os.open(path, os.O_WRONLY))
            reached.append(f"opened {path}")
        except OSError:
            pass
    try:
        os.listdir(f"/proc/{pid}/fd")
        reached.append(f"listed /proc/{pid}/fd")
    except OSError:
        pass
print(len(others), "others")
print("\n".join(reached) or "reached none")
"""


def test_code_cannot_reach_into_the_supervisor_or_keepalive(runner) -> None:
    result = runner(code=REACH_OTHERS, limits=FAST)
    assert result.exit_code == 0, result
    count, verdict = result.stdout.split("\n", 1)
    assert int(count.split()[0]) >= 1, result.stdout  # the supervisor at least
    assert verdict == "reached none\n", result.stdout


def test_x32_and_i386_system_calls_do_not_bypass_the_filter(runner) -> None:
    # ptrace through the x32 ABI (nr | 0x40000000) must not attach to the supervisor.
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "rc = libc.syscall(0x40000000 | 101, 16, os.getppid(), 0, 0)\n"
        "print('rc', rc)\n"
    )
    code = (
        "import subprocess, sys\n"
        f"p = subprocess.run([sys.executable, '-c', {probe!r}], capture_output=True, text=True)\n"
        "print(p.returncode, p.stdout.strip())\n"
    )
    result = runner(code=code, limits=FAST)
    assert result.exit_code == 0, result
    assert "rc 0" not in result.stdout, result.stdout


def test_new_namespaces_and_vsock_are_denied(runner) -> None:
    code = (
        "import ctypes, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"  # CLONE_NEWUSER
        "try:\n"
        "    socket.socket(40, socket.SOCK_STREAM)\n"
        "    print('VSOCK OPENED')\n"
        "except OSError as e:\n"
        "    print('vsock denied')\n"
    )
    result = runner(code=code, limits=FAST)
    assert result.stdout == "unshare -1 1\nvsock denied\n", result


ALLOW_ALL_BPF = bytes([0x06, 0, 0, 0, 0x00, 0x00, 0xFF, 0x7F])  # BPF_RET|BPF_K SECCOMP_RET_ALLOW


def test_bwrap_refuses_to_start_when_the_filter_does_not_take_effect(monkeypatch) -> None:
    from forge_agent.sandbox import bwrap, make_sandbox

    monkeypatch.setattr(bwrap, "bwrap_filter", lambda python: ALLOW_ALL_BPF)
    with pytest.raises(SandboxError, match="not hardened: the seccomp filter does not deny"):
        make_sandbox("bwrap").run(code="print(1)")


def test_docker_refuses_to_start_when_the_filter_does_not_take_effect(
    monkeypatch, docker_engine
) -> None:
    from forge_agent.sandbox import docker, make_sandbox

    monkeypatch.setattr(docker, "docker_profile", lambda: '{"defaultAction": "SCMP_ACT_ALLOW"}')
    sandbox = make_sandbox("docker", base_url=docker_engine)
    with pytest.raises(SandboxError, match="not hardened"):
        sandbox.run(code="print(1)")
    with pytest.raises(SandboxError, match="not hardened"):
        sandbox.session()


def test_workspace_modules_are_importable(runner) -> None:
    files = {"solution.py": "def f():\n    return 42\n"}
    result = runner(code="import solution\nprint(solution.f())", files=files, limits=FAST)
    assert result.stdout == "42\n", result
    if runner.session is not None:  # a file the code itself wrote, imported by a later run
        runner(code="open('helper.py', 'w').write('X = 7\\n')", limits=FAST)
        result = runner(code="import helper\nprint(helper.X)", limits=FAST)
        assert result.stdout == "7\n", result


def test_planted_modules_cannot_hijack_a_restarted_supervisor(any_sandbox) -> None:
    hijack = "open('/workspace/HIJACKED', 'w').write('x')\nraise SystemExit(3)\n"
    with any_sandbox.session() as session:
        for name in ("json", "ctypes", "traceback", "select", "resource", "signal", "io"):
            session.write_file(f"{name}.py", hijack)
        if hasattr(session, "_proc"):
            session._proc.kill()
            session._proc.wait()
        else:
            session._container.kill()
        result = session.run(code="print('fine')", limits=FAST)
        assert result.stdout == "fine\n", result
        assert session.restarts == 1
        with pytest.raises(FileNotFoundError):
            session.read_file("HIJACKED")


DEEP_TREE = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')"


def test_a_deep_directory_tree_cannot_defeat_teardown(runner) -> None:
    result = runner(code=DEEP_TREE, limits=FAST)
    assert result.stdout == "deep\n", result


def test_a_session_with_a_deep_tree_closes_and_leaves_nothing(any_sandbox) -> None:
    session = any_sandbox.session()
    assert session.run(code=DEEP_TREE, limits=FAST).stdout == "deep\n"
    workspace = session.workspace
    session.close()
    assert not os.path.exists(workspace)


def test_large_replies_come_back_whole(runner) -> None:
    code = "import sys\nprint('x' * 50000)\nsys.stderr.write('y' * 50000)"
    result = runner(code=code, limits=FAST)
    assert result.exit_code == 0, result
    assert result.stdout == "x" * 50000 + "\n" and result.stderr == "y" * 50000, result.describe()


@ROOT_ONLY
def test_workspace_bytes_and_files_are_bounded(any_sandbox) -> None:
    limits = Limits(wall_s=20, cpu_s=20, file_size_mb=64, workspace_mb=8, workspace_files=200)
    with any_sandbox.session(limits) as session:
        big = (
            "try:\n"
            "    with open('big.bin', 'wb') as f:\n"
            "        for _ in range(32):\n"
            "            f.write(b'0' * (1 << 20))\n"
            "    print('WROTE 32 MB')\n"
            "except OSError as e:\n"
            "    print('stopped', e.strerror)\n"
        )
        result = session.run(code=big)
        assert result.stdout == "stopped No space left on device\n", result
        session.run(code="import os\nos.remove('big.bin')")
        many = (
            "n = 0\n"
            "try:\n"
            "    for n in range(100000):\n"
            "        open(f'f{n}', 'w').close()\n"
            "except OSError as e:\n"
            "    print('stopped', e.strerror)\n"
            "print(n < 300)\n"
        )
        result = session.run(code=many)
        assert result.stdout == "stopped No space left on device\nTrue\n", result


def test_the_memory_budget_queues_then_refuses(any_sandbox, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(admission.LEDGER_ENV, str(tmp_path))
    backend = type(any_sandbox)
    kwargs = {"memory_budget_mb": 1000, "admission_timeout_s": 0.3}
    if any_sandbox.name == "docker":
        kwargs["base_url"] = any_sandbox.base_url
    small = backend(Limits(memory_mb=512, workspace_mb=256), **kwargs)
    first = small.session()
    try:
        with pytest.raises(SandboxError, match="budget of 1000 MB is full: 768 MB reserved"):
            small.session()
    finally:
        first.close()
    with small.session() as second:  # room again
        assert second.run(code="print(1)").stdout == "1\n"
    with pytest.raises(SandboxError, match="can never fit"):
        small.run(code="print(1)", limits=Limits(memory_mb=2000))


def test_the_default_budget_is_below_host_memory() -> None:
    with open("/proc/meminfo") as f:
        total_mb = int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) // 1024
    assert 0 < admission.default_budget_mb() < total_mb


KILLED_OWNER = """
import json, os, signal, sys
from forge_agent.sandbox import make_sandbox
kwargs = json.loads(sys.argv[1])
session = make_sandbox(**kwargs).session()
session.run(code="import os\\nfor _ in range(50):\\n    os.mkdir('d'); os.chdir('d')")
cgroups = [str(p) for p in getattr(getattr(session, "_cgroup", None), "dirs", {}).values()]
container = getattr(getattr(session, "_container", None), "id", None)
print(json.dumps({"paths": [session.workspace, *cgroups], "container": container}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_owner_leaves_no_workspace_cgroup_or_container(any_sandbox) -> None:
    import json
    import subprocess
    import sys
    import time

    kwargs = {"backend": any_sandbox.name}
    if any_sandbox.name == "docker":
        kwargs["base_url"] = any_sandbox.base_url
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_OWNER, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    left = json.loads(proc.stdout)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        remaining = [p for p in left["paths"] if os.path.exists(p)]
        if left["container"]:
            names = {c.id for c in any_sandbox.client.containers.list(all=True)}
            remaining += [left["container"]] if left["container"] in names else []
        if not remaining:
            break
        time.sleep(0.2)
    assert remaining == []
    with open("/proc/self/mounts") as f:
        assert left["paths"][0] not in f.read()

"""Behaviour of the sandbox interface on the bubblewrap backend (never skipped)."""

from __future__ import annotations

import os

import pytest

from forge_agent.sandbox import Limits, SandboxError, make_sandbox
from forge_agent.sandbox.bwrap import BubblewrapSandbox

try:
    from sandbox_fixtures import bwrap_sandbox
except ImportError:  # tests/ is a package
    from tests.sandbox_fixtures import bwrap_sandbox  # noqa: F401


def test_make_sandbox_defaults_to_bubblewrap() -> None:
    assert isinstance(make_sandbox(), BubblewrapSandbox)


def test_make_sandbox_rejects_unknown_backend() -> None:
    with pytest.raises(ValueError, match="'podman'"):
        make_sandbox("podman")


def test_missing_bwrap_raises_sandbox_error() -> None:
    with pytest.raises(SandboxError, match="no-such-bwrap"):
        make_sandbox("bwrap", bwrap="no-such-bwrap")


def test_missing_python_raises_sandbox_error() -> None:
    with pytest.raises(SandboxError, match="/nope/python3"):
        make_sandbox("bwrap", python="/nope/python3")


def test_code_runs_with_system_python_as_nobody_in_the_workspace(bwrap_sandbox) -> None:
    code = "import os, sys\nprint(os.getuid(), os.getgid(), os.getcwd(), sys.executable)"
    result = bwrap_sandbox.run(code=code)
    assert result.ok and result.stdout == "65534 65534 /workspace /usr/bin/python3\n", result


def test_argv_runs_a_command(bwrap_sandbox) -> None:
    result = bwrap_sandbox.run(argv=["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert not result.ok


def test_missing_command_exits_127(bwrap_sandbox) -> None:
    result = bwrap_sandbox.run(argv=["no-such-command"])
    assert result.exit_code == 127 and "no-such-command" in result.stderr


def test_exactly_one_of_code_and_argv(bwrap_sandbox) -> None:
    with pytest.raises(ValueError):
        bwrap_sandbox.run()
    with pytest.raises(ValueError):
        bwrap_sandbox.run(code="1", argv=["true"])


def test_exceptions_and_sys_exit_behave_like_python_dash_c(bwrap_sandbox) -> None:
    failed = bwrap_sandbox.run(code="raise ValueError('boom')")
    assert failed.exit_code == 1 and failed.stderr.endswith("ValueError: boom\n")
    assert 'File "<string>", line 1' in failed.stderr and "supervisor" not in failed.stderr
    assert bwrap_sandbox.run(code="import sys; sys.exit(7)").exit_code == 7
    assert bwrap_sandbox.run(code="print(__name__)").stdout == "__main__\n"


def test_environment_is_cleared(bwrap_sandbox) -> None:
    os.environ["FORGE_SECRET_TOKEN"] = "hunter2"
    try:
        result = bwrap_sandbox.run(code="import os; print(sorted(os.environ))")
    finally:
        del os.environ["FORGE_SECRET_TOKEN"]
    assert "FORGE_SECRET_TOKEN" not in result.stdout


def test_files_are_written_before_the_run(bwrap_sandbox) -> None:
    files = {"pkg/helper.py": "VALUE = 41\n", "data.bin": b"\x00\x01"}
    code = "from pkg.helper import VALUE\nprint(VALUE + 1, len(open('data.bin','rb').read()))"
    result = bwrap_sandbox.run(code=code, files=files)
    assert result.stdout == "42 2\n", result


def test_killed_by_signal_is_reported(bwrap_sandbox) -> None:
    result = bwrap_sandbox.run(code="import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert result.signal == 15 and result.exit_code is None and not result.timed_out


def test_session_keeps_files_between_runs(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session:
        session.run(code="open('state.txt', 'w').write('step 1')")
        session.write_file("notes/extra.txt", "from the host")
        result = session.run(argv=["cat", "state.txt", "notes/extra.txt"])
        assert result.stdout == "step 1from the host"
        assert session.read_file("state.txt") == "step 1"


def test_session_runs_are_warm(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session:
        session.run(code="pass")
        durations = [session.run(code="print(1)").duration_s for _ in range(5)]
    assert min(durations) < 0.2, durations


def test_session_file_paths_cannot_escape(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session:
        for bad in ("/etc/passwd", "../outside.txt", "a/../../b", ""):
            with pytest.raises(ValueError):
                session.write_file(bad, "x")
            with pytest.raises(ValueError):
                session.read_file(bad)
        with pytest.raises(FileNotFoundError):
            session.read_file("missing.txt")


def test_host_reads_never_follow_symlinks_planted_by_the_code(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session:
        session.run(code="import os\nos.symlink('/etc/shadow', 'link')\nos.symlink('/etc', 'dir')")
        with pytest.raises(PermissionError):
            session.read_file("link")
        with pytest.raises(OSError):  # refused, not followed (ENOTDIR on the symlink)
            session.read_file("dir/shadow")
        with pytest.raises(OSError):
            session.write_file("link", "overwrite the host file?")


def test_dead_session_restarts_and_keeps_its_workspace(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session:
        session.write_file("kept.txt", "kept")
        session._proc.kill()  # the sandbox dies (as if the OOM killer struck)
        session._proc.wait()
        result = session.run(argv=["cat", "kept.txt"])
        assert result.stdout == "kept" and session.restarts == 1


def test_closed_session_raises(bwrap_sandbox) -> None:
    session = bwrap_sandbox.session()
    workspace = session.workspace
    session.close()
    session.close()  # idempotent
    assert not os.path.exists(workspace)
    with pytest.raises(SandboxError):
        session.run(code="1")


def test_limits_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="wall_s"):
        Limits(wall_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=-1)


def test_network_flag_must_match_the_session(bwrap_sandbox) -> None:
    with bwrap_sandbox.session() as session, pytest.raises(ValueError, match="network"):
        session.run(code="1", limits=Limits(network=True))

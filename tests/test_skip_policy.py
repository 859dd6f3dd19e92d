"""The suite's skip policy: skips outside the allow-list fail the run; every reason is printed."""

from __future__ import annotations

import subprocess
import sys


def run_pytest(tmp_path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\n\ndef test_runs():\n    pass\n\n\n" + body
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.skip_policy", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_skip_outside_the_allow_list_fails_the_session_and_is_printed(tmp_path):
    out = run_pytest(
        tmp_path, 'def test_needs_pkg():\n    pytest.skip("somepkg is not installed")\n'
    )
    assert out.returncode == 1, out.stdout
    assert "1 passed, 1 skipped" in out.stdout
    assert "test_needs_pkg: somepkg is not installed" in out.stdout
    assert "outside the allow-list" in out.stdout


def test_a_module_level_importorskip_fails_the_session(tmp_path):
    out = run_pytest(tmp_path, 'pytest.importorskip("no_such_module_here")\n')
    assert out.returncode == 1, out.stdout
    assert "no_such_module_here" in out.stdout


def test_hardware_skips_on_the_allow_list_pass_and_are_printed(tmp_path):
    out = run_pytest(
        tmp_path,
        'def test_gpu():\n    pytest.skip("no CUDA device: needs a GPU")\n\n\n'
        'def test_docker():\n    pytest.skip("dockerd failed (no Docker engine on this host)")\n',
    )
    assert out.returncode == 0, out.stdout
    assert "test_gpu: no CUDA device: needs a GPU" in out.stdout
    assert "no Docker engine on this host" in out.stdout

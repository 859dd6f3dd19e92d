"""The run's console: the project's lines on the terminal, third-party output in run.log."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# what a library does: C-level and child-process writes, Python logging, warnings.warn
_PROGRAM = textwrap.dedent(
    """
    import logging, subprocess, sys, warnings
    from forge_agent.observability.console import run_console

    with run_console(sys.argv[1], verbose=sys.argv[2] == "1"):
        print("[setup] project line", flush=True)
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child noise\\\\n')"])
        logging.getLogger("vllm.engine").warning("library warning")
        warnings.warn("a deprecated library call", FutureWarning)
        logging.getLogger("forge_agent.run.controller").warning("project warning")
        print("[eval] step 0: mean 0.5", file=sys.stderr, flush=True)
    print("after the run", flush=True)
    """
)


def _run(tmp_path: Path, verbose: bool) -> tuple[str, str]:
    log = tmp_path / "run.log"
    out = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(log), "1" if verbose else "0"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr, log.read_text() if log.exists() else ""


def test_third_party_output_goes_to_the_log_file_and_project_lines_to_the_terminal(tmp_path):
    terminal, log = _run(tmp_path, verbose=False)
    for line in ("[setup] project line", "[eval] step 0", "project warning", "after the run"):
        assert line in terminal
    for noise in ("child noise", "library warning", "deprecated library call"):
        assert noise not in terminal
        assert noise in log


def test_verbose_shows_everything_on_the_terminal(tmp_path):
    terminal, _ = _run(tmp_path, verbose=True)
    for line in ("[setup] project line", "child noise", "library warning", "project warning"):
        assert line in terminal


_BARS = textwrap.dedent(
    """
    import sys
    import transformers.utils.logging as hf_logging  # imported before the console, as in a run
    from forge_agent.observability.console import run_console

    with run_console(sys.argv[1]):
        for _ in hf_logging.tqdm(range(3), desc="Loading weights"):
            pass
        print("[setup] project line", flush=True)
    assert hf_logging.is_progress_bar_enabled()  # given back after the run
    """
)


def test_progress_bars_of_libraries_imported_before_the_run_stay_off_the_terminal(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _BARS, str(tmp_path / "run.log")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "[setup] project line" in out.stdout
    assert "Loading weights" not in out.stdout + out.stderr

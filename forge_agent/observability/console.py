"""The run's console: the project's own lines on the terminal, third-party output in a file.

    with run_console(Path("runs/default/run.log"), verbose=False):
        ...  # print() and the progress bar reach the terminal; vLLM, torch, Triton and Monarch
             # logs (this process's and every child process's) go to run.log

Third-party libraries write from many processes (Monarch procs, vLLM's engine core and worker,
env workers) and from C and Rust as well as Python, so filtering Python loggers is not enough.
Quiet mode points the process's file descriptors 1 and 2 at the log file, so every child
inherits them, and gives this process's `sys.stdout` / `sys.stderr` duplicates of the
terminal's descriptors: the project's `print` lines, the progress bar and tracebacks stay on
the terminal. Python logging goes to the file, except the project's own warnings
(`forge_agent.*` loggers), which also reach the terminal. `verbose=True` changes nothing:
everything reaches the terminal, as a plain process would.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

PROJECT_LOGGER = "forge_agent"
# progress bars third-party libraries draw on stderr (loading a dataset, a hub download)
QUIET_ENV = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


@contextlib.contextmanager
def _library_bars_off() -> Iterator[None]:
    """Progress bars of libraries already imported (their env switches are read at import):
    transformers' "Loading weights" bar and the hub's bars stay off the terminal."""
    import importlib

    switches = []
    for module, is_on, off, on in (
        ("transformers.utils.logging", "is_progress_bar_enabled", "disable_progress_bar",
         "enable_progress_bar"),
        ("huggingface_hub.utils", None, "disable_progress_bars", "enable_progress_bars"),
    ):  # fmt: skip
        if module.split(".")[0] not in sys.modules:
            continue  # imported later: QUIET_ENV covers it
        mod = importlib.import_module(module)
        was_on = getattr(mod, is_on)() if is_on else not mod.are_progress_bars_disabled()
        getattr(mod, off)()
        switches.append((mod, on, was_on))
    try:
        yield
    finally:
        for mod, on, was_on in switches:
            if was_on:
                getattr(mod, on)()


def _terminal_stream(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        os.fdopen(fd, "wb", buffering=0), encoding="utf-8", errors="replace", line_buffering=True
    )


@contextlib.contextmanager
def run_console(
    log_path: Path | str, verbose: bool = False, level: str = "WARNING"
) -> Iterator[Path]:
    """Route output for one run (see the module docstring); yields the log file's path.

    `level`: the Python logging level written to the file (env var FORGE_AGENT_LOG in the app).
    Restores descriptors, streams and logging on exit."""
    log_path = Path(log_path)
    root = logging.getLogger()
    if verbose:
        logging.basicConfig(level=level)
        yield log_path
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    saved_env = {k: os.environ.get(k) for k in QUIET_ENV}
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    sys.stdout.flush()
    sys.stderr.flush()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    saved_fds = os.dup(1), os.dup(2)
    saved_streams = sys.stdout, sys.stderr
    saved_root = root.level, list(root.handlers)
    terminal_out, terminal_err = _terminal_stream(os.dup(1)), _terminal_stream(os.dup(2))
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stdout, sys.stderr = terminal_out, terminal_err
    file_handler = logging.StreamHandler(open(log_path, "a", encoding="utf-8"))  # noqa: SIM115
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    project_handler = logging.StreamHandler(terminal_err)
    project_handler.setLevel(logging.WARNING)
    project_handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    project = logging.getLogger(PROJECT_LOGGER)
    root.handlers = [file_handler]
    root.setLevel(level)
    project.addHandler(project_handler)
    logging.captureWarnings(True)  # warnings.warn of libraries: to the file, not the terminal
    bars = _library_bars_off()
    bars.__enter__()
    try:
        yield log_path
    finally:
        bars.__exit__(None, None, None)
        logging.captureWarnings(False)
        project.removeHandler(project_handler)
        root.handlers = saved_root[1]
        root.setLevel(saved_root[0])
        file_handler.close()
        for stream in (terminal_out, terminal_err):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = saved_streams
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        for stream in (terminal_out, terminal_err):
            with contextlib.suppress(Exception):
                stream.close()
        for key, old in saved_env.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


__all__ = ["run_console"]

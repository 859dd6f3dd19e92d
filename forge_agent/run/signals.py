"""Ctrl-C (SIGINT) and SIGTERM stop a run cleanly, from its first second to its last.

Two phases need two mechanisms:
- before the event loop is free (model build, the warm start: seconds to minutes of blocking
  torch work on the loop's thread), `python_handlers()` raises `KeyboardInterrupt` in the main
  thread; Monarch's runtime, started when the first proc mesh spawns, replaces the process's
  SIGINT disposition, so the handlers are installed again explicitly;
- once actors run, `cancel_on_signals(task)` makes a signal cancel the run's task, so every
  actor, env worker and sandbox is shut down by the run's `finally`. A cancel can be lost on
  the way: Python 3.11's `asyncio.wait_for` returns its result, swallowing the cancel, when
  the awaited call completes in the same loop turn (fixed in 3.12). The training loop calls
  `raise_if_cancelled()` at each step, so such a stop takes effect one step later.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _announce(sig: signal.Signals) -> None:
    print(f"\n[{sig.name}] stopping: shutting actors, env workers and sandboxes down", flush=True)


@contextlib.contextmanager
def python_handlers() -> Iterator[None]:
    """While blocking work runs on the main thread: a signal raises `KeyboardInterrupt` there."""

    def interrupt(signum: int, frame: object) -> None:
        _announce(signal.Signals(signum))
        raise KeyboardInterrupt

    try:
        previous = {sig: signal.signal(sig, interrupt) for sig in SIGNALS}
    except ValueError:  # not the main thread: the caller's own handling stands
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def cancel_on_signals(task: asyncio.Task | None) -> Iterator[None]:
    """While the loop runs: a signal cancels `task` (the run), which then shuts down."""
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        _announce(sig)
        if task is not None:
            task.cancel()

    with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
        for sig in SIGNALS:
            loop.add_signal_handler(sig, stop, sig)
            handled.append(sig)
    try:
        yield
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


def raise_if_cancelled() -> None:
    """Raise `CancelledError` if the running task was cancelled and goes on anyway (a cancel
    swallowed by an await on the way, `asyncio.wait_for` before Python 3.12): a Ctrl-C that
    printed "stopping" then stops the run, instead of the run finishing its steps."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError

"""One call in a spawned child process of its own (`run_in_child`): what the call allocates
(the warm start's base model, demonstrations, trainer and optimizer: 6.6 GB in a SmolLM2-135M
run's controller, which kept them) lives and dies with the child; the caller reads back the
answer only.

The child writes where the caller's console writes: under `observability.console.run_console`
the caller's descriptors 1 and 2 are the run's log (third-party output) and its `sys.stdout` is
the terminal; the child gets the same split (a copy of the terminal's descriptor for its
`print` lines and the project's warnings; descriptors 1 and 2 inherited). An error the call
raises is raised in the caller as itself where it pickles (its traceback added as a note), and
Ctrl-C or SIGTERM in the caller stops the child at once.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TypeVar

from forge_agent.errors import SetupError
from forge_agent.observability.console import PROJECT_LOGGER

T = TypeVar("T")


def run_in_child(fn: Callable[..., T], *args: object, what: str) -> T:
    """`fn(*args)` in a spawned child process; its result (`fn` and `args` must pickle).
    `what` names the work in errors and the process's name ("warm start")."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    console = _console()
    child = ctx.Process(
        target=_child, args=(fn, args, send, console), name=f"forge-agent-{what.replace(' ', '-')}"
    )
    child.start()
    send.close()  # the child holds the only write end: its exit ends recv() with EOFError
    if console is not None:
        console.close()
    try:
        ok, value, trace = receive.recv()
    except EOFError:
        child.join()
        raise SetupError(
            f"the {what}'s process (pid {child.pid}) exited {child.exitcode} before answering "
            "(killed? out of memory?); its output is above"
        ) from None
    except BaseException:  # Ctrl-C or SIGTERM while the child works: it stops now, with us
        _stop(child, grace_s=10)
        raise
    child.join(timeout=60)
    if child.is_alive():  # a child that hangs after answering
        _stop(child, grace_s=10)
    if ok:
        return value
    if isinstance(value, BaseException):
        value.add_note(f"raised in the {what}'s process:\n{trace}")
        raise value
    raise SetupError(f"the {what} failed in its process: {value}\n{trace}")


def _console() -> Connection | None:
    """A copy of this process's console stream (`sys.stdout`'s descriptor) that the child
    receives as its own; None where `sys.stdout` has no descriptor (a captured stream)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    return Connection(os.dup(fd), readable=False)


def _stop(child: BaseProcess, grace_s: float) -> None:
    child.terminate()
    child.join(timeout=grace_s)
    if child.is_alive():
        child.kill()
        child.join()


def _child(
    fn: Callable[..., object], args: tuple, send: Connection, console: Connection | None
) -> None:
    """`run_in_child`'s child: (True, result, "") or (False, the error, its traceback) sent
    back."""
    if console is not None:
        _write_to(console)
    try:
        result: tuple[bool, object, str] = (True, fn(*args), "")
    except BaseException as exc:  # everything goes back to the caller
        error: object = exc
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:  # an error that does not pickle: its text
            error = f"{type(exc).__name__}: {exc}"
        result = (False, error, traceback.format_exc())
    send.send(result)
    send.close()


def _write_to(console: Connection) -> None:
    """`print` and the project's warnings to `console` (the caller's terminal); the inherited
    descriptors 1 and 2 keep third-party output (the run's log under `run_console`)."""
    stream = io.TextIOWrapper(
        os.fdopen(os.dup(console.fileno()), "wb", buffering=0),
        encoding="utf-8",
        errors="replace",
        line_buffering=True,
    )
    console.close()
    sys.stdout = stream
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    logging.getLogger(PROJECT_LOGGER).addHandler(handler)


__all__ = ["run_in_child"]

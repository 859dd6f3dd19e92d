"""The error a run's inputs raise when they cannot work (``SetupError``), and the error that
marks a failure as infra rather than the policy's (``InfraError``).

A ``SetupError`` is about something the user gave (a config key, a YAML file, an env id, a
data file, a model name): its message is one line naming that input and the fix. Programs
(``apps.agent.main``, ``apps.eval``, ``apps.serve``) print it as one line and exit with status
2; ``--verbose`` shows the traceback too. Any other exception is a bug and keeps its traceback.

This module imports nothing, so every layer (config, env registry, data loading, model lookup)
can raise a subclass without pulling in the engine.
"""

from __future__ import annotations

import sys
import traceback
from typing import TextIO

__all__ = ["EXIT_SETUP_ERROR", "InfraError", "SetupError", "TamperingError", "report_setup_error"]

EXIT_SETUP_ERROR = 2
"""The exit status of a program stopped by a ``SetupError`` (as for a command-line error)."""


class SetupError(Exception):
    """A run cannot start because of an input: the message names it and how to fix it."""

    kind = "setup error"  # the word a program prints before the message


class InfraError(RuntimeError):
    """A failure the policy cannot cause: a sandbox that does not start, a server that is down,
    the host out of resources. An env, tool or grader raises it (or a subclass) so the episode
    ends as infra (`env_error`: excluded from training, counted); any other exception an env
    raises while acting on the policy's message is the policy's failure (`policy_error`,
    scored with the env's failure reward). See docs/rewards.md."""


class TamperingError(Exception):
    """The policy's code interfered with its grader (a canary test passed, a verdict was
    forged): an env raises it from `step` and the episode ends `tampered`, scoring the env's
    failure reward, trained on and counted."""


def report_setup_error(exc: SetupError, verbose: bool = False, stream: TextIO | None = None) -> int:
    """Print `exc` as one line on stderr (after its traceback when `verbose`); returns the exit
    status, `EXIT_SETUP_ERROR`."""
    stream = stream or sys.stderr
    if verbose:
        traceback.print_exception(exc, file=stream)
    hint = "" if verbose or exc.kind == "config error" else " (--verbose shows the traceback)"
    print(f"{exc.kind}: {exc}{hint}", file=stream, flush=True)
    return EXIT_SETUP_ERROR

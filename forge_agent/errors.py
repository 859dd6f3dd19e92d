"""The error a run's inputs raise when they cannot work (``SetupError``), the error of a run
that failed after it started (``RunFailed``), and the error that marks a failure as infra
rather than the policy's (``InfraError``).

A ``SetupError`` is about something the user gave (a config key, a YAML file, an env id, a
data file, a model name): its message is one line naming that input and the fix. Programs
(``apps.agent.main``, ``apps.eval``, ``apps.serve``) print it as one line and exit with status
2; ``--verbose`` shows the traceback too. A ``RunFailed`` is a run stopped mid-way (a service
that recovery could not bring back, envs that fail every episode, an exception out of the
training loop): one line naming the failing part, its exception and where the outputs are, exit
status 3. Any other exception is a bug and keeps its traceback.

Exit statuses of the programs: 0 done, 2 a bad input (``EXIT_SETUP_ERROR``), 3 a run that
failed mid-way (``EXIT_RUN_FAILED``), 130 Ctrl-C (SIGINT) or SIGTERM.

This module imports nothing, so every layer (config, env registry, data loading, model lookup)
can raise a subclass without pulling in the engine.
"""

from __future__ import annotations

import sys
import traceback
from typing import TextIO

__all__ = [
    "EXIT_RUN_FAILED",
    "EXIT_SETUP_ERROR",
    "InfraError",
    "PolicyTimeout",
    "RunFailed",
    "SetupError",
    "TamperingError",
    "report_run_failed",
    "report_setup_error",
]

EXIT_SETUP_ERROR = 2
"""The exit status of a program stopped by a ``SetupError`` (as for a command-line error)."""

EXIT_RUN_FAILED = 3
"""The exit status of a run stopped mid-way by a ``RunFailed``."""


class SetupError(Exception):
    """A run cannot start because of an input: the message names it and how to fix it."""

    kind = "setup error"  # the word a program prints before the message


class InfraError(RuntimeError):
    """A failure the policy cannot cause: a sandbox that does not start, a server that is down,
    the host out of resources. An env, tool or grader raises it (or a subclass) so the episode
    ends as infra (`env_error`: excluded from training, counted); any other exception an env
    raises while acting on the policy's message is the policy's failure (`policy_error`,
    scored with the env's failure reward). See docs/rewards.md."""


class PolicyTimeout(Exception):
    """Work on the policy's output ran past its deadline inside a step (a sandboxed judge
    evaluating its answer): an env raises it from `step` and the episode ends
    `policy_timeout`, scoring the env's failure reward, like a step past its own deadline."""


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


class RunFailed(Exception):
    """A run that started and could not go on: `part` names what failed (`generator0 service`,
    `env 'shop'`, `module forge_agent.x`), `error` its exception's text, `step` the last step
    trained; `kept` lists what the run left behind (label -> path: the log, the traces, the
    last checkpoint, or why there is none). The original exception is `__cause__`."""

    def __init__(self, part: str, error: str, step: int, kept: dict[str, str]) -> None:
        self.part, self.error, self.step, self.kept = part, error, step, kept
        super().__init__(part, error)

    def __str__(self) -> str:
        return self.line()

    def line(self) -> str:
        """The one line a program prints for it."""
        kept = "; ".join(f"{label}: {path}" for label, path in self.kept.items())
        return f"run failed after step {self.step}: {self.part}: {self.error} ({kept})"


def report_run_failed(exc: RunFailed, verbose: bool = False, stream: TextIO | None = None) -> int:
    """Print `exc` as one line on stderr (after the traceback of its cause when `verbose`);
    returns the exit status, `EXIT_RUN_FAILED`."""
    stream = stream or sys.stderr
    if verbose:
        traceback.print_exception(exc.__cause__ or exc, file=stream)
    print(exc.line(), file=stream, flush=True)
    return EXIT_RUN_FAILED

"""The ``python`` tool: run a Python snippet in the episode's sandbox."""

from __future__ import annotations

from forge_agent.sandbox import RunResult, SandboxSession

__all__ = ["format_run_result", "python", "python_without_example"]


def python(code: str, *, sandbox: SandboxSession) -> str:
    """Run a Python 3 program in a sandbox and return what it printed and its exit status.

    The program runs in the episode's workspace directory (files persist between calls, no
    network). Use print() to see values.

    Args:
        code: The complete Python source to run, for example "print(sum(range(10)))".
    """
    if not isinstance(code, str) or not code.strip():
        return "Error: code must be a non-empty string of Python source"
    return format_run_result(sandbox.run(code=code))


def _python_without_example(code: str, *, sandbox: SandboxSession) -> str:
    """Run a Python 3 program in a sandbox and return what it printed and its exit status.

    The program runs in the episode's workspace directory (files persist between calls, no
    network). Use print() to see values.

    Args:
        code: The complete Python source to run.
    """
    return python(code, sandbox=sandbox)


_python_without_example.__name__ = "python"
_python_without_example.__qualname__ = "python"

python_without_example = _python_without_example
"""`python` whose argument description shows no example program, as
`tools.calculator.calculator_without_example` (issue 59: a real model copied a tool
description's example as its call). The calculator's program-of-thought family offers it;
`python` keeps its example (code_exec's recorded runs and the tiny model's tokenizer)."""


def format_run_result(result: RunResult) -> str:
    """Render a `RunResult` as the observation text a model reads."""
    sections = []
    if result.stdout:
        sections.append(f"stdout:\n{result.stdout.rstrip(chr(10))}")
    if result.stderr:
        sections.append(f"stderr:\n{result.stderr.rstrip(chr(10))}")
    if result.timed_out:
        status = "timed out (the program was killed)"
    elif result.oom:
        status = "out of memory (the program was killed or raised MemoryError)"
    elif result.signal is not None:
        status = f"killed by signal {result.signal}"
    else:
        status = f"exit code {result.exit_code}"
    if result.truncated:
        status += "; output truncated"
    sections.append(status)
    return "\n".join(sections)

"""The host's side of the in-sandbox supervisor, shared by the backends: the source text sent
into a sandbox (`SUPERVISOR_SOURCE`) and the check of the hardening it reports
(`hardening_problem`).

The supervisor is two modules, each importable here: `supervised_run` (running one request in
a forked child) and `supervisor` (its modes, replies and hardening), which imports the first.
The sandbox has no `forge_agent`, so it gets them as one stdlib-only text: `supervised_run`,
then `supervisor` without that import line. bwrap runs the text with ``python3 -I -c``; Docker
writes it to ``supervisor.py`` in the control folder and runs the file.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SUPERVISOR_SOURCE", "hardening_problem", "supervisor_source"]

HOST_IMPORT = "from forge_agent.sandbox.supervised_run import "
"""The line of `supervisor.py` that only the host needs: the sandbox gets both files as one."""


def supervisor_source(folder: Path = Path(__file__).parent) -> str:
    """`supervised_run.py` then `supervisor.py` of `folder`, less the host import: one file."""
    main = (folder / "supervisor.py").read_text().splitlines(keepends=True)
    kept = [line for line in main if not line.startswith(HOST_IMPORT)]
    if len(kept) != len(main) - 1:
        raise RuntimeError(f"supervisor.py must import supervised_run in one {HOST_IMPORT!r} line")
    return (folder / "supervised_run.py").read_text() + "\n\n" + "".join(kept)


SUPERVISOR_SOURCE = supervisor_source()


def hardening_problem(found: object) -> str | None:
    """Why a supervisor's `hardening()` report is not good enough, or None when it is."""
    if not isinstance(found, dict):
        return f"no hardening report (got {found!r})"
    if found.get("seccomp") != 2:
        return f"no seccomp filter (Seccomp: {found.get('seccomp')})"
    if found.get("filter_denies") is not True:
        return "the seccomp filter does not deny process_vm_readv"
    if found.get("no_new_privs") != 1:
        return f"no_new_privs is not set ({found.get('no_new_privs')})"
    if found.get("dumpable") != 0:
        return f"the supervisor is dumpable (PR_GET_DUMPABLE: {found.get('dumpable')})"
    return None

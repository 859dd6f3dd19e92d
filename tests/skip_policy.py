"""Skip policy of the suite (a pytest plugin, loaded by tests/conftest.py).

A test that skips on a fresh machine is a test CI never runs. Only reasons naming hardware this
host lacks may skip (``ALLOWED_SKIP_REASONS``); any other skip fails the session, and every skip
reason is printed in the summary.
"""

from __future__ import annotations

from typing import Any

import pytest

ALLOWED_SKIP_REASONS = ("no CUDA device", "no Docker engine")

_skips: list[tuple[str, str]] = []


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append((report.nodeid, _skip_reason(report)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skips.append((report.nodeid, _skip_reason(report)))


def unexpected_skips() -> list[tuple[str, str]]:
    """The skips of this session whose reason names none of ``ALLOWED_SKIP_REASONS``."""
    return [s for s in _skips if not any(ok in s[1] for ok in ALLOWED_SKIP_REASONS)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if unexpected_skips() and exitstatus in (0, 5):  # 5: every test skipped at collection
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _skips:
        return
    terminalreporter.section("skip reasons")
    for nodeid, reason in _skips:
        terminalreporter.write_line(f"{nodeid}: {reason}")
    bad = unexpected_skips()
    if bad:
        allowed = ", ".join(repr(r) for r in ALLOWED_SKIP_REASONS)
        terminalreporter.write_line(
            f"FAILED: {len(bad)} test(s) skipped for a reason outside the allow-list "
            f"({allowed}); install what they need in scripts/setup.sh",
            red=True,
        )

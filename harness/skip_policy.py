"""Which skips a test run may have, and a CI run that fails on any other.

A skipped test proves nothing, and a run that exits 0 with it reads as a
pass. A test may skip only for what a user cannot change on that machine:
there is no GPU, or the installed vLLM release does not have the seam the
test checks (:func:`unavailable_here`, or ``pytest.importorskip`` with a
reason that starts with :data:`UNAVAILABLE_HERE`). Any
other skip, missing data or a missing package, is a defect of the test run;
under ``CI=true`` the run fails and names each such skip (this module is
loaded as a pytest plugin from ``pyproject.toml``).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

# Every skip a user cannot undo carries this, so the policy can tell it apart.
UNAVAILABLE_HERE = "not available here: "
_ONLY_IN_CI = ("1", "true", "yes")
_unexcused: list[str] = []


def unavailable_here(reason: str) -> NoReturn:
    """Skip: this machine or this vLLM release lacks what the test checks (``reason`` says what)."""
    pytest.skip(UNAVAILABLE_HERE + reason)


def _enforced() -> bool:
    return os.environ.get("CI", "").strip().lower() in _ONLY_IN_CI


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _reason(report)
        if not reason.startswith(UNAVAILABLE_HERE):
            _unexcused.append(f"{report.nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    # A module-level skip (``importorskip`` at import) is reported at collection.
    if report.skipped:
        reason = _reason(report)  # type: ignore[arg-type]
        if not reason.startswith(UNAVAILABLE_HERE):
            _unexcused.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexcused and _enforced() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _unexcused:
        return
    verdict = "these fail the run under CI=true" if _enforced() else "CI=true fails on these"
    terminalreporter.section("skips for a reason the machine does not impose")
    terminalreporter.write_line(
        f"{len(_unexcused)} skipped for a reason other than no GPU or a vLLM release "
        f"without the seam ({verdict}):"
    )
    for line in _unexcused:
        terminalreporter.write_line(f"  {line}")

"""pytest plugin for SWE grading, loaded in the sandbox with `-p rllm_swe_report` (standard library + pytest only).

Records each test's outcome by node id (failed in setup or teardown counts as "error"), collection errors, whether
the two canary tests came out as they must (one passes, one fails: a run where the failing one "passed" was
tampered with), and whether pytest's own reporting functions are still the ones it started with. At the end of the
session the record is in `RECORD`, which the harness (rllm_swe_harness.py) sends back."""

from __future__ import annotations

import os

import _pytest.reports
import _pytest.runner
import pytest

_WATCHED = {
    "runner.pytest_runtest_makereport": (_pytest.runner, "pytest_runtest_makereport"),
    "runner.call_and_report": (_pytest.runner, "call_and_report"),
    "runner.CallInfo.from_call": (_pytest.runner.CallInfo, "from_call"),
    "reports.TestReport.__init__": (_pytest.reports.TestReport, "__init__"),
    "reports.TestReport.from_item_and_call": (_pytest.reports.TestReport, "from_item_and_call"),
    "pytest.fail": (pytest, "fail"),
    "pytest.skip": (pytest, "skip"),
}
_ORIGINAL = {name: vars(owner).get(attr) for name, (owner, attr) in _WATCHED.items()}
_outcomes: dict[str, str] = {}
_collect_errors: list[str] = []
_failures: dict[str, str] = {}  # node id -> the end of its failure report, for issue texts
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
RECORD: dict = {}


def pytest_runtest_logreport(report) -> None:
    if report.when == "call":
        outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
    elif report.failed:
        outcome = "error"
    elif report.skipped:
        outcome = "skipped"
    else:
        outcome = "passed"
    if report.failed and report.nodeid not in _failures:
        _failures[report.nodeid] = str(report.longrepr)[-3000:]
    previous = _outcomes.get(report.nodeid)
    if previous is None or _RANK[outcome] > _RANK[previous]:
        _outcomes[report.nodeid] = outcome


def pytest_collectreport(report) -> None:
    if report.failed:
        _collect_errors.append(f"{report.nodeid}: {str(report.longrepr)[-500:]}")


def pytest_sessionfinish(session, exitstatus) -> None:
    nonce = os.environ.get("RLLM_SWE_CANARY", "")
    canary = {"pass": None, "fail": None}
    for nodeid, outcome in _outcomes.items():
        if nonce and nodeid.endswith(f"_{nonce}"):
            canary["pass" if nodeid.endswith(f"::test_canary_passes_{nonce}") else "fail"] = outcome
    patched = [name for name, (owner, attr) in _WATCHED.items() if vars(owner).get(attr) is not _ORIGINAL[name]]
    outcomes = {k: v for k, v in _outcomes.items() if not (nonce and k.endswith(f"_{nonce}"))}
    failures = {k: v for k, v in _failures.items() if k in outcomes}
    RECORD.update(
        outcomes=outcomes,
        collect_errors=_collect_errors,
        exitstatus=int(exitstatus),
        canary=canary,
        patched=patched,
        failures=failures,
    )

"""rLLM's KodCode rows, graded in rllm's sandbox: the row's tests are a pytest file that does `from solution import
...`, so the reply's code becomes `solution.py` beside it and pytest runs both, inside the sandbox.

The sandbox runs the standard library only; pytest and what it imports (`_pytest`, `pluggy`, `iniconfig`,
`packaging`, `pygments`) are bound read-only from this interpreter's installation at `/opt/rllm-pytest` (its `py.py`
shim is copied in), and pytest plugins are not auto-loaded. Without pytest installed here a KodCode row raises
`UnsupportedCodeRowError`.

The verdict does not come from pytest's exit code (a solution that calls `os._exit(0)` on import would pass): a
trusted driver reads a per-run nonce from stdin before pytest imports anything of the row's, counts outcomes with a
pytest plugin, and writes one report carrying the nonce to the sandbox's result channel. All tests collected must
pass (at least one), as rLLM's `pytest` exit status 0 requires. The solution runs in the driver's interpreter, so,
as with rllm's `humaneval` format, a solution that manipulates the interpreter (reads the nonce from memory, patches
pytest) can defeat it: prefer stdin/stdout or `fn_name` rows where the reward is adversarial.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import secrets
from typing import Any

from rllm.compat.rewards.code_rows import UnsupportedCodeRowError, with_prelude

__all__ = ["PYTEST_PACKAGES", "run_pytest_row"]

PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments")
PYTEST_MODULES = ("py",)  # single-file modules pytest imports: copied into the run's /work, beside the driver
MOUNT = "/opt/rllm-pytest"
PER_TEST_TIMEOUT_S = 5.0  # rLLM's, per test function
MAX_TIMEOUT_S = 60.0
_DRIVER_FILE = "rllm_pytest_driver.py"
_OUTPUT_TAIL = 1500

# The trusted driver. It reads the nonce before pytest imports the test file (and through it the solution), then
# reports once, to the result channel (fd 3), after pytest returns.
_DRIVER = r"""
import json, os, sys


class Counts:
    def __init__(self):
        self.passed = self.failed = self.errors = self.skipped = 0

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors += 1

    def pytest_runtest_logreport(self, report):
        if report.failed:
            if report.when == "call":
                self.failed += 1
            else:
                self.errors += 1
        elif report.skipped and report.when in ("setup", "call"):
            self.skipped += 1
        elif report.passed and report.when == "call":
            self.passed += 1


def main():
    nonce = sys.stdin.readline().strip()  # a local, not a global of __main__ a solution could import
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    channel = os.dup(3)
    os.close(3)
    import pytest

    counts = Counts()
    args = ["-q", "-p", "no:cacheprovider", "--maxfail=1", "test_solution.py"]
    status = int(pytest.main(args, plugins=[counts]))
    report = {"nonce": nonce, "exit_code": status, "passed": counts.passed, "failed": counts.failed,
              "errors": counts.errors, "skipped": counts.skipped}
    sys.stdout.flush()
    os.write(channel, (json.dumps(report) + "\n").encode())
    os._exit(0)


main()
"""


@functools.cache
def _pytest_binds() -> dict[str, str]:
    """Host directory -> where the sandbox sees it, for pytest and its imports; UnsupportedCodeRowError without."""
    binds = {}
    for name in PYTEST_PACKAGES:
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            missing = f"kodcode rows need pytest in rllm's interpreter ({name} is missing): pip install pytest"
            raise UnsupportedCodeRowError(missing)
        binds[locations[0]] = f"{MOUNT}/{name}"
    return binds


@functools.cache
def _pytest_module_files() -> dict[str, bytes]:
    files = {}
    for name in PYTEST_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise UnsupportedCodeRowError(
                f"kodcode rows need pytest's {name}.py in rllm's interpreter: pip install pytest"
            )
        with open(spec.origin, "rb") as source:
            files[f"{name}.py"] = source.read()
    return files


def run_pytest_row(code: str, tests: str, *, sandbox: Any = None) -> dict:
    """Run the pytest file `tests` against `code` (as `solution.py`) in the sandbox; rLLM-style metadata with
    `all_passed`."""
    from rllm.sandbox import default_sandbox

    sandbox = sandbox if sandbox is not None else default_sandbox()
    count = max(1, tests.count("def test"))
    wall = min(MAX_TIMEOUT_S, PER_TEST_TIMEOUT_S * count + 5)
    nonce = secrets.token_hex(16)
    limits = _limits(sandbox, wall)
    result = sandbox.run(
        sandbox.python_argv(_DRIVER_FILE),
        files={
            **_pytest_module_files(),
            _DRIVER_FILE: _DRIVER,
            "solution.py": with_prelude(code),
            "test_solution.py": tests,
        },
        stdin=f"{nonce}\n".encode(),
        limits=limits,
        ro_binds=_pytest_binds(),
        env={"PYTHONPATH": MOUNT, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    return _metadata(result, nonce, count)


def _limits(sandbox: Any, wall_s: float) -> Any:
    import dataclasses
    import math

    from rllm.sandbox import SandboxLimits

    base = getattr(sandbox, "limits", None) or SandboxLimits()
    return dataclasses.replace(base, wall_s=wall_s, cpu_s=max(base.cpu_s, math.ceil(wall_s)))


def _metadata(result: Any, nonce: str, count: int) -> dict:
    output = result.stdout.decode("utf-8", "replace")[-_OUTPUT_TAIL:]
    report = _report(result.result.decode("utf-8", "replace").splitlines(), nonce)
    if report is None:
        why = f"killed ({result.killed_reason})" if result.killed_reason else "no valid report from the test run"
        return {
            "all_passed": False,
            "passed_tests": 0,
            "total_tests": count,
            "test_results": [{"passed": False, "output": output}],
            "first_failure": why,
            "feedback": output or why,
            "error": why,
        }
    passed = report["exit_code"] == 0 and report["failed"] == report["errors"] == 0 and report["passed"] >= 1
    seen = report["passed"] + report["failed"] + report["errors"] + report["skipped"]
    failures = [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    first_failure = None if passed else (failures[0] if failures else "no test passed")
    return {
        "all_passed": passed,
        "passed_tests": report["passed"],
        "total_tests": max(seen, count),  # --maxfail=1 stops at the first failure: the file's count then
        "test_results": [{"passed": passed, "output": output}],
        "first_failure": first_failure,
        "feedback": output,
    }


def _report(lines: list[str], nonce: str) -> dict | None:
    """The one report line, if it carries this run's nonce; more than one line (a forged one too) is no report."""
    if len(lines) != 1:
        return None
    try:
        report = json.loads(lines[0])
    except json.JSONDecodeError:
        return None
    keys = ("exit_code", "passed", "failed", "errors", "skipped")
    if (
        not isinstance(report, dict)
        or report.get("nonce") != nonce
        or not all(type(report.get(k)) is int for k in keys)
    ):
        return None
    return report

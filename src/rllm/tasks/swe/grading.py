"""Grading an SWE episode: the agent's diff, applied to a pristine copy in a fresh sandbox the agent never touched,
against the hidden tests.

1. Policy, before anything runs (`check_submission`): a diff that touches a test file, a `conftest.py`, a pytest or
   tox configuration, a `.pth` file, `sitecustomize`/`usercustomize`, compiled bytecode, or a module that would
   shadow the test runner, or whose added lines name pytest, unittest, `sys.exit`, `os._exit`, `builtins` or
   `sys.modules`, scores 0 with the reason ("protected_path"). `grade(..., policy=False)` skips it; the run below
   still holds.
2. The run (`run_tests`): the task's full tree (bug + hidden tests) under a tmpfs overlay, the diff applied with `git
   apply` inside the sandbox (a diff that does not apply scores 0, "patch_failed"), then EVERY protected file put back
   as the pristine tree has it, whatever the diff did (rllm_swe_harness.is_protected: test files, `conftest.py`,
   pytest's configuration files, start-up files, bytecode), then pytest on FAIL_TO_PASS + PASS_TO_PASS and two canary
   tests, with the runtime first on the path and `python -P` (the repository cannot shadow pytest). How the row's tests
   run (`test_cmd`, `test_env`: `task_test_setup`) adds pytest options and environment, e.g. `PYTHONPATH=src` for a
   src-layout package. No network, a wall clock (a grader timed out scores 0, "grader_timeout").
3. The verdict (`grade`): 1 only if every FAIL_TO_PASS and PASS_TO_PASS test passed. A test module that does not
   import is a collection error: its tests failed ("tests_failed", the error in the detail), as are tests that never
   reported (a `sys.exit` or `os._exit` mid-run) and a run whose passing canary did not pass. "tampering" is only
   what a run shows: the failing canary "passed" or pytest's reporting functions were replaced while it ran, or (with
   the policy off) the diff changed protected files and the tests, run on the pristine ones, did not pass.
   `partial_credit=True` gives the passed fraction of FAIL_TO_PASS instead, still 0 if any PASS_TO_PASS test broke.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rllm.tasks.swe.patches import patch_paths
from rllm.tasks.swe.rllm_swe_harness import is_protected, is_test_path
from rllm.tasks.swe.store import RUNTIME_MOUNT, SWEDataError, runtime_dir

__all__ = [
    "NOT_SOURCE",
    "GradeResult",
    "TestRun",
    "check_submission",
    "grade",
    "is_protected",
    "is_test_path",
    "repo_pythonpath",
    "run_tests",
    "task_test_setup",
    "test_files",
]

_HERE = Path(__file__).parent
_CONFIG_FILES = {
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "conftest.py",
    "noxfile.py",
    ".coveragerc",
}
_SHADOWING = {
    "pytest",
    "_pytest",
    "pluggy",
    "iniconfig",
    "py",
    "coverage",
    "sitecustomize",
    "usercustomize",
    "rllm_swe_report",
    "rllm_swe_harness",
    "rllm_swe_patches",
    "rllm_swe_trace",
}
_FORBIDDEN_CODE = re.compile(
    r"\b(_?pytest|unittest|sys\s*\.\s*exit|os\s*\.\s*_exit|builtins|__builtins__|"
    r"sys\s*\.\s*modules|settrace|setprofile|atexit)\b"
)


# path parts of a package tree that are neither its source nor its tests
NOT_SOURCE = {"docs", "doc", "benchmark", "benchmarks", "examples", "build", "setup.py"}


def test_files(tree: Path) -> list[str]:
    """The test modules of a tree (`test_*.py`, `*_test.py`), relative, sorted."""
    found = []
    for path in tree.rglob("*.py"):
        rel = path.relative_to(tree)
        if (path.name.startswith("test_") or path.name.endswith("_test.py")) and not NOT_SOURCE & set(rel.parts):
            found.append(rel.as_posix())
    return sorted(found)


def check_submission(diff: str) -> str | None:
    """Why a diff may not be graded (a reward hack or a protected file), or None when it may."""
    for path in patch_paths(diff):
        pure = PurePosixPath(path)
        if ".." in pure.parts or pure.is_absolute():
            return f"the diff names a path outside the repository: {path}"
        if is_test_path(path):
            return f"the diff changes a test file: {path}"
        if pure.name in _CONFIG_FILES:
            return f"the diff changes the test configuration: {path}"
        if pure.suffix in (".pyc", ".pyo") or "__pycache__" in pure.parts:
            return f"the diff adds compiled bytecode, which would run instead of the source: {path}"
        if pure.suffix == ".pth" or pure.stem in _SHADOWING or (pure.parts and pure.parts[0] in _SHADOWING):
            return f"the diff adds a file that runs at start-up or shadows the test runner: {path}"
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++") and (hit := _FORBIDDEN_CODE.search(line)):
            return f"the diff's code uses {hit.group(0)!r}, which the grader does not allow: {line[1:].strip()[:120]}"
    return None


@dataclass
class TestRun:
    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> passed / failed / error / skipped
    collect_errors: list[str] = field(default_factory=list)
    patch_failed: str | None = None
    tampered: str | None = None
    killed_reason: str | None = None  # timeout, memory, ...
    output: str = ""
    duration_s: float = 0.0
    coverage: dict = field(default_factory=dict)  # with coverage=True: file -> line -> [test function contexts]
    failures: dict[str, str] = field(default_factory=dict)  # node id -> the end of its failure report
    traces: dict = field(default_factory=dict)  # with trace=True: node id -> its calls into the package
    restored: list[str] = field(default_factory=list)  # protected files the diff changed, put back before pytest ran
    broken: str | None = None  # why the run tells nothing (pytest stopped early, the passing canary did not pass)


# the variables the grader sets itself; a row's test_env may not name them
_GRADER_ENV = {"RLLM_SWE_CANARY", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PYTEST_COMMANDS = (["pytest"], ["python", "-m", "pytest"], ["python3", "-m", "pytest"])


def task_test_setup(task: dict) -> tuple[list[str], dict[str, str]]:
    """(pytest options, environment) a row's tests need: its `test_cmd` ("pytest [options]", as SWE-bench's specs
    write it) and `test_env` (variables; PYTHONPATH's entries are directories of the repository, e.g. "src").
    A row without them: ([], {}), the flat layout (the repository's root on the path)."""
    where = task.get("instance_id", "the task")
    options: list[str] = []
    if (command := task.get("test_cmd")) is not None:
        words = shlex.split(command) if isinstance(command, str) else None
        runner = next((r for r in _PYTEST_COMMANDS if words and words[: len(r)] == r), None)
        if runner is None:
            raise SWEDataError(f"{where}: test_cmd must run pytest ('pytest [options]'), got {command!r}")
        options = words[len(runner) :]
    env = task.get("test_env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise SWEDataError(f"{where}: test_env must map variable names to strings, got {env!r}")
    for name, value in env.items():
        if not _ENV_NAME.match(name) or name in _GRADER_ENV:
            raise SWEDataError(f"{where}: test_env may not set {name!r} (the grader sets it, or it is not a name)")
        if name == "PYTHONPATH":
            _check_repo_dirs(value, where)
    return options, dict(env)


def _check_repo_dirs(pythonpath: str, where: str) -> None:
    for entry in pythonpath.split(":"):
        pure = PurePosixPath(entry)
        if not entry or pure.is_absolute() or ".." in pure.parts:
            raise SWEDataError(
                f"{where}: test_env's PYTHONPATH names directories of the repository relative to its root "
                f"(e.g. 'src'), got {pythonpath!r}"
            )


def repo_pythonpath(test_env: dict[str, str]) -> list[str]:
    """The row's PYTHONPATH entries (`test_env`) as directories under /testbed, in order."""
    return [f"/testbed/{entry}".rstrip("/") for entry in test_env.get("PYTHONPATH", "").split(":") if entry]


def _sandbox_env(test_env: dict[str, str], nonce: str) -> dict[str, str]:
    """The grader's environment with the row's: its PYTHONPATH entries under /testbed, after the runtime (the
    repository still cannot shadow pytest) and before the repository's root."""
    return {
        **test_env,
        "PYTHONPATH": ":".join([RUNTIME_MOUNT, "/work", *repo_pythonpath(test_env), "/testbed"]),
        "RLLM_SWE_CANARY": nonce,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }


def run_tests(
    tree: str | Path,
    pytest_args: list[str],
    *,
    diff: str | None = None,
    sandbox=None,
    timeout_s: float = 300.0,
    coverage: bool = False,
    memory_mb: int = 1024,
    trace: bool = False,
    test_options: list[str] | tuple[str, ...] = (),
    test_env: dict[str, str] | None = None,
) -> TestRun:
    """Run pytest on `tree` in a fresh sandbox (writes land on a tmpfs, never in `tree`), after applying `diff` and
    putting the protected files back. `test_options`, `test_env`: how the task's tests run (`task_test_setup`).
    `trace=True` records each test's calls into the package (rllm_swe_trace: for task statements, not grading)."""
    from rllm.sandbox import RepoMount, SandboxLimits, default_sandbox

    sandbox = sandbox or default_sandbox()
    nonce = secrets.token_hex(8)
    files = {name: (_HERE / name).read_text() for name in ("rllm_swe_harness.py", "rllm_swe_report.py")}
    options = ["--coverage"] if coverage else []
    if trace:
        files["rllm_swe_trace.py"] = (_HERE / "rllm_swe_trace.py").read_text()
        options.append("--trace")
    if diff is not None:
        files["submission.diff"] = diff
        options += ["--diff", "/work/submission.diff"]
    limits = SandboxLimits(
        wall_s=timeout_s,
        cpu_s=int(timeout_s) + 1,
        memory_mb=memory_mb,
        pids=128,
        tmpfs_mb=256,
        output_bytes=1 << 20,
        result_bytes=64 << 20,
    )
    argv = [
        sandbox.python_argv("rllm_swe_harness.py")[0],
        "-s",
        "-B",
        "-P",
        "/work/rllm_swe_harness.py",
        *options,
        "--",
        *test_options,
        *pytest_args,
    ]
    env = _sandbox_env(test_env or {}, nonce)
    result = sandbox.run(
        argv,
        files=files,
        limits=limits,
        repo=RepoMount(str(tree), size_mb=256),
        ro_binds={str(runtime_dir()): RUNTIME_MOUNT},
        env=env,
    )
    run = TestRun(
        killed_reason=result.killed_reason,
        duration_s=result.duration_s,
        output=(result.stdout + result.stderr).decode(errors="replace")[-4000:],
    )
    try:
        record = json.loads(result.result) if result.result else {}
    except ValueError:
        record = {}
    if "patch_failed" in record:
        run.patch_failed = str(record["patch_failed"])
        return run
    run.outcomes = {str(k): str(v) for k, v in (record.get("outcomes") or {}).items()}
    run.collect_errors = list(record.get("collect_errors") or [])
    run.coverage = record.get("coverage") or {}
    run.failures = {str(k): str(v) for k, v in (record.get("failures") or {}).items()}
    run.traces = dict(record.get("traces") or {})
    run.restored = [str(p) for p in record.get("restored") or []]
    run.tampered, run.broken = _judge_run(record, run.output)
    return run


def _judge_run(record: dict, output: str) -> tuple[str | None, str | None]:
    """(tampered, broken) from the harness's record: tampering is only what the run shows (the failing canary
    "passed", pytest's functions replaced); a run that stopped early or whose passing canary did not pass is broken,
    which an honest import error can cause, and scores 0 as failed tests."""
    canary = record.get("canary")
    if canary is None:  # pytest never finished a session: a usage error, a conftest that does not import, a kill
        tail = output.strip()[-600:] or "no output"
        return None, f"pytest stopped before the tests ran: {tail}"
    if record.get("patched"):
        return f"pytest's reporting was replaced while it ran: {record['patched']}", None
    if canary.get("pass") != "passed":
        return None, f"the grader's passing control test did not pass ({canary.get('pass')}): the run tells nothing"
    if canary.get("fail") not in ("failed", "error"):
        return f"the grader's failing control test came out {canary.get('fail')}: outcomes were forced", None
    return None, None


@dataclass
class GradeResult:
    reward: float
    resolved: bool
    reason: str  # resolved, tests_failed, protected_path, patch_failed, grader_timeout, tampering, empty_patch, ...
    detail: str = ""
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass_failed: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def grade(
    task: dict,
    diff: str,
    *,
    sandbox=None,
    partial_credit: bool = False,
    timeout_s: float = 300.0,
    policy: bool = True,
) -> GradeResult:
    """The reward of `diff` on `task` (see the module docstring). `policy=False` skips `check_submission` (the run
    still puts every protected file back, so a hack the policy would have refused gains nothing)."""
    from rllm.tasks.swe.store import task_trees

    if not diff.strip():
        return GradeResult(0.0, False, "empty_patch", "the repository was not changed")
    if policy and (why := check_submission(diff)) is not None:
        return GradeResult(0.0, False, "protected_path", why)
    options, env = task_test_setup(task)
    _, full = task_trees(task)
    f2p, p2p = list(task["FAIL_TO_PASS"]), list(task["PASS_TO_PASS"])
    run = run_tests(
        full, [*f2p, *p2p], diff=diff, sandbox=sandbox, timeout_s=timeout_s, test_options=options, test_env=env
    )
    return verdict(run, f2p, p2p, partial_credit)


def verdict(run: TestRun, f2p: list[str], p2p: list[str], partial_credit: bool = False) -> GradeResult:
    if run.patch_failed is not None:
        return GradeResult(0.0, False, "patch_failed", run.patch_failed, duration_s=run.duration_s)
    if run.killed_reason is not None:
        reason = "grader_timeout" if run.killed_reason == "timeout" else f"grader_{run.killed_reason}"
        return GradeResult(0.0, False, reason, run.output[-1000:], duration_s=run.duration_s)
    if run.tampered is not None:
        return GradeResult(0.0, False, "tampering", run.tampered, duration_s=run.duration_s)
    f2p_outcomes = {t: run.outcomes.get(t, "missing") for t in f2p}
    broken = [t for t in p2p if run.outcomes.get(t) != "passed"]
    fixed = sum(o == "passed" for o in f2p_outcomes.values())
    resolved = fixed == len(f2p) and not broken and run.broken is None
    reward = 1.0 if resolved else (fixed / len(f2p) if partial_credit and f2p and not broken else 0.0)
    if run.broken is not None:
        reward = 0.0
    if resolved:
        reason = "resolved"
    else:  # an honest failure; with the policy off, a diff that changed protected files and failed shows tampering
        reason = "tampering" if run.restored else "tests_failed"
    detail = "; ".join(_failure_details(run, len(f2p) - fixed, len(f2p), len(broken), resolved))
    return GradeResult(reward, resolved, reason, detail, f2p_outcomes, broken, run.duration_s)


def _last_line(collect_error: str) -> str:
    """'node: report' -> 'node: the report's last line' (`E   ModuleNotFoundError: No module named 'calc'`)."""
    node, _, report = collect_error.partition(": ")
    lines = [line.strip() for line in report.splitlines() if line.strip()]
    return f"{node}: {lines[-1] if lines else report}"[:300]


def _failure_details(run: TestRun, still_failing: int, f2p: int, broken: int, resolved: bool) -> list[str]:
    details = (
        []
        if resolved
        else [f"{still_failing} of {f2p} FAIL_TO_PASS tests still fail; {broken} PASS_TO_PASS tests broke"]
    )
    if run.restored:
        details.append(f"the diff changed protected files, put back before the tests ran: {', '.join(run.restored)}")
    if run.collect_errors and not resolved:
        errors = " | ".join(_last_line(error) for error in run.collect_errors[:5])
        details.append(f"tests that did not import (collection errors): {errors}")
    if run.broken is not None:
        details.append(run.broken)
    return details

"""Grading an SWE episode: the agent's diff, applied to a pristine copy in a fresh sandbox the agent never touched,
against the hidden tests.

1. Policy, before anything runs (`check_submission`): a diff that touches a test file, a `conftest.py`, a pytest or
   tox configuration, a `.pth` file, `sitecustomize`/`usercustomize`, or a module that would shadow the test
   runner, or whose added lines name pytest, unittest, `sys.exit`, `os._exit`, `builtins` or `sys.modules`, scores 0
   with the reason. (Test files are also restored by construction: the grading tree is the pristine one.)
2. The run (`run_tests`): the task's full tree (bug + hidden tests) under a tmpfs overlay, the diff applied with `git
   apply` inside the sandbox (a diff that does not apply scores 0, "patch_failed"), then pytest on FAIL_TO_PASS +
   PASS_TO_PASS and two canary tests, with the runtime first on the path and `python -P` (the repository cannot
   shadow pytest). No network, a wall clock (a grader timed out scores 0, "grader_timeout").
3. The verdict (`grade`): 1 only if every FAIL_TO_PASS and PASS_TO_PASS test passed; 0 if the canaries came out
   wrong (the failing canary "passed") or pytest's reporting functions were replaced while it ran ("tampered");
   tests that never reported (a `sys.exit` or `os._exit` mid-run) count as failed. `partial_credit=True` gives the
   passed fraction of FAIL_TO_PASS instead, still 0 if any PASS_TO_PASS test broke.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rllm.tasks.swe.patches import patch_paths
from rllm.tasks.swe.store import RUNTIME_MOUNT, runtime_dir

__all__ = [
    "NOT_SOURCE",
    "GradeResult",
    "TestRun",
    "check_submission",
    "grade",
    "is_test_path",
    "run_tests",
    "test_files",
]

_HERE = Path(__file__).parent
_CONFIG_FILES = {"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "conftest.py", "noxfile.py", ".coveragerc"}
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


def is_test_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (
        any(p in ("test", "tests", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


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
) -> TestRun:
    """Run pytest on `tree` in a fresh sandbox (writes land on a tmpfs, never in `tree`), after applying `diff`.
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
        *pytest_args,
    ]
    env = {
        "PYTHONPATH": f"{RUNTIME_MOUNT}:/work:/testbed",
        "RLLM_SWE_CANARY": nonce,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
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
    canary = record.get("canary") or {}
    if record and (canary.get("pass") != "passed" or canary.get("fail") not in ("failed", "error")):
        run.tampered = f"the canary tests came out wrong: {canary}"
    elif record.get("patched"):
        run.tampered = f"pytest's reporting was replaced while it ran: {record['patched']}"
    return run


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
    task: dict, diff: str, *, sandbox=None, partial_credit: bool = False, timeout_s: float = 300.0
) -> GradeResult:
    """The reward of `diff` on `task` (see the module docstring)."""
    from rllm.tasks.swe.store import task_trees

    if not diff.strip():
        return GradeResult(0.0, False, "empty_patch", "the repository was not changed")
    if (why := check_submission(diff)) is not None:
        return GradeResult(0.0, False, "protected_path", why)
    _, full = task_trees(task)
    f2p, p2p = list(task["FAIL_TO_PASS"]), list(task["PASS_TO_PASS"])
    run = run_tests(full, [*f2p, *p2p], diff=diff, sandbox=sandbox, timeout_s=timeout_s)
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
    resolved = fixed == len(f2p) and not broken
    reward = 1.0 if resolved else (fixed / len(f2p) if partial_credit and f2p and not broken else 0.0)
    detail = (
        ""
        if resolved
        else (f"{len(f2p) - fixed} of {len(f2p)} FAIL_TO_PASS tests still fail; {len(broken)} PASS_TO_PASS tests broke")
    )
    return GradeResult(
        reward, resolved, "resolved" if resolved else "tests_failed", detail, f2p_outcomes, broken, run.duration_s
    )

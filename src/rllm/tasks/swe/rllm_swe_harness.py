"""Runs in the grading sandbox (standard library + pytest): apply the submitted diff to /testbed with `git apply`,
put every protected file back as it was (`undo_protected`), then run pytest on the given node ids plus the two
canary tests, outcomes going to fd 3 (rllm_swe_report). A module that fails to import is a collection error of its
tests (`--continue-on-collection-errors`): the other tests and the canaries still run.
argv: [--diff FILE] [--coverage] [--trace] -- pytest arguments. `--trace` records the calls each test makes into
the package (rllm_swe_trace), for task statements. `--snapshot FILE` / `--restore FILE` [--root DIR] do the
protecting alone, around a diff applied by someone else (Docker grading's shell script).

Protected (`is_protected`): what decides which tests run and how they report, which a fix never needs to change:
test files (`is_test_path`: under a `test`/`tests`/`testing` directory, `test_*.py`, `*_test.py`), every
`conftest.py`, the files pytest reads its configuration from (`PYTEST_CONFIG`: all of `pytest.ini`, `.pytest.ini`,
`tox.ini`, `setup.cfg`, `pyproject.toml`, whole, since pytest takes `[pytest]`, `[tool:pytest]` and
`[tool.pytest...]` from them), files that run when a Python starts (`*.pth`, `sitecustomize.py`,
`usercustomize.py`: a test may start one), and compiled bytecode (`*.pyc`, `*.pyo`, anything in `__pycache__`:
Python and pytest's assertion rewriter run a cached file that matches its source's size and time instead of the
source). Whatever the diff did to them is undone before pytest starts: changed or
deleted ones are written back from the pristine tree, new ones removed. This module is also imported by the host
(rllm.tasks.swe.grading), so the rule is written once."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import PurePosixPath

TESTBED = "/testbed"
PYTEST_CONFIG = frozenset({"pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "conftest.py"})
STARTUP_FILES = frozenset({"sitecustomize.py", "usercustomize.py"})
RESTORED_MARKER = ">>>>> rllm: protected files restored: "  # + a JSON list, printed by --restore


def is_test_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return (
        any(p in ("test", "tests", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def is_protected(path: str) -> bool:
    """Whether grading puts `path` (relative to the repository) back as the pristine tree has it."""
    pure = PurePosixPath(path)
    name = pure.name
    return (
        is_test_path(path)
        or name in PYTEST_CONFIG
        or name in STARTUP_FILES
        or name.endswith((".pth", ".pyc", ".pyo"))
        or "__pycache__" in pure.parts
    )


def protected_files(root: str) -> dict[str, tuple[str, bytes]]:
    """The protected files under root: relative path -> ("link", target) or ("file", content)."""
    found = {}
    for directory, dirs, files in os.walk(root):  # does not follow links to directories
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in (*files, *(d for d in dirs if os.path.islink(os.path.join(directory, d)))):
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            if not is_protected(rel):
                continue
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path).encode())
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    found[rel] = ("file", f.read())
    return found


def undo_protected(root: str, pristine: dict[str, tuple[str, bytes]]) -> list[str]:
    """Put the protected files under root back as `pristine` (protected_files before the diff) has them: the
    paths that had changed, sorted."""
    now = protected_files(root)
    changed = sorted(rel for rel in pristine.keys() | now.keys() if pristine.get(rel) != now.get(rel))
    for rel in changed:
        path = os.path.join(root, rel)
        _make_real_directories(root, os.path.dirname(rel))
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)
        if rel not in pristine:
            continue
        kind, data = pristine[rel]
        if kind == "link":
            os.symlink(data.decode(), path)
        else:
            with open(path, "wb") as f:
                f.write(data)
    return changed


def _make_real_directories(root: str, rel_dir: str) -> None:
    """Each directory from root down to rel_dir a real one (a link or file the diff put in its place removed), so
    that a restored file lands inside the repository."""
    current = root
    for part in PurePosixPath(rel_dir).parts if rel_dir else ():
        current = os.path.join(current, part)
        if os.path.islink(current) or os.path.isfile(current):
            os.unlink(current)
        os.makedirs(current, exist_ok=True)


def save_protected(root: str, file: str) -> None:
    """`protected_files(root)` into `file`, for `restore_protected` after a diff (Docker grading, where the diff
    is applied by a shell script: `--snapshot FILE --root DIR`)."""
    with open(file, "wb") as f:
        pickle.dump(protected_files(root), f)


def restore_protected(root: str, file: str) -> list[str]:
    """`undo_protected` against the snapshot `save_protected` wrote (`--restore FILE --root DIR`)."""
    with open(file, "rb") as f:
        return undo_protected(root, pickle.load(f))


def _snapshot_or_restore(options: list[str]) -> int:
    root = options[options.index("--root") + 1] if "--root" in options else TESTBED
    if "--snapshot" in options:
        save_protected(root, options[options.index("--snapshot") + 1])
    else:
        restored = restore_protected(root, options[options.index("--restore") + 1])
        print(RESTORED_MARKER + json.dumps(restored), flush=True)
    return 0


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    options, pytest_args = argv[:split], argv[split + 1 :]
    if "--snapshot" in options or "--restore" in options:
        return _snapshot_or_restore(options)
    restored: list[str] = []
    if "--diff" in options:
        diff = options[options.index("--diff") + 1]
        pristine = protected_files(TESTBED)
        command = ["git", "apply", "--whitespace=nowarn", diff]
        done = subprocess.run(command, check=False, cwd=TESTBED, capture_output=True, text=True)
        if done.returncode != 0:
            send({"patch_failed": (done.stdout + done.stderr)[-2000:]})
            return 0
        restored = undo_protected(TESTBED, pristine)
    nonce = os.environ["RLLM_SWE_CANARY"]
    canary = f"/tmp/rllm_canary_{nonce}.py"
    with open(canary, "w") as f:
        f.write(f"def test_canary_passes_{nonce}():\n    assert True\n\n\n")
        f.write(f"def test_canary_fails_{nonce}():\n    assert False\n")
    args = [
        *pytest_args,
        canary,
        "-p",
        "rllm_swe_report",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        TESTBED,
        "--continue-on-collection-errors",
        "-q",
        "--no-header",
        "-rN",
        "--color=no",
        "--tb=short",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    ]
    if "--trace" in options:
        args += ["-p", "rllm_swe_trace"]
    if "--coverage" in options:  # the generator: which tests run which lines
        import coverage

        cov = coverage.Coverage(data_file="/tmp/.coverage", source=[TESTBED], omit=["*/tests/*", "*/test_*"])
        cov.set_option("run:dynamic_context", "test_function")
        cov.start()
    import pytest
    import rllm_swe_report

    code = pytest.main(args)
    record = dict(rllm_swe_report.RECORD, restored=restored)
    if "--coverage" in options:
        cov.stop()
        data = cov.get_data()
        record["coverage"] = {
            os.path.relpath(path, TESTBED): {
                str(line): sorted(c for c in contexts if c)
                for line, contexts in (data.contexts_by_lineno(path) or {}).items()
            }
            for path in data.measured_files()
        }
    if "--trace" in options:
        import rllm_swe_trace

        record["traces"] = rllm_swe_trace.TRACES
    send(record)
    return int(code)


def send(record: dict) -> None:
    with os.fdopen(3, "wb") as channel:
        channel.write(json.dumps(record).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

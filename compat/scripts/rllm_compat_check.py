"""Run rLLM v0.2.1's own unit tests and its examples' import lines against this package.

Nothing of rLLM's is in this repository: give a checkout of rllm-org/rllm (tag v0.2.1) and this script copies its
test files to a temporary directory outside both trees, puts this repository's core (`src/`) and this distribution
(`compat/src/`) first on the path, and runs
pytest on the files issue 40 names. It prints, per file, collected/passed/failed/skipped, then how many distinct
`from rllm... import ...` lines of the checkout's `examples/` import here.

    python compat/scripts/rllm_compat_check.py /path/to/rllm            # against this package
    python compat/scripts/rllm_compat_check.py /path/to/rllm --theirs   # baseline: rLLM's own code, same interpreter

`--json FILE` writes every test's outcome; `--baseline FILE` (a `--theirs --json` run) lists each test that passes
on rLLM's own code but not here.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

COMPAT = Path(__file__).resolve().parents[1]  # this distribution's folder; the core's src/ is beside it
TEST_PATHS = ("tests/agents", "tests/envs", "tests/parser/test_tool_parser.py", "tests/rewards", "tests/tools")
_PROBE = """
import json, sys
ok = {}
for line in json.loads(sys.argv[1]):
    try:
        exec(line, {})
        ok[line] = True
    except BaseException:
        ok[line] = False
print(json.dumps(ok))
"""
# pytest -rA's summary: "PASSED tests/x.py::test_y", "SKIPPED [1] tests/x.py:12: why", "ERROR tests/x.py - ..."
_OUTCOME = re.compile(r"^(?P<outcome>PASSED|FAILED|ERROR|XFAIL|XPASS) (?P<id>[^\s]+)")
_SKIPPED = re.compile(r"^SKIPPED \[(?P<count>\d+)\] (?P<file>[^:\s]+):(?P<line>\d+)")


def main() -> int:
    args = _parse()
    checkout = Path(args.checkout).resolve()
    if not (checkout / "tests").is_dir() or not (checkout / "examples").is_dir():
        sys.exit(f"error: {checkout} has no tests/ and examples/; give a checkout of rllm-org/rllm (tag v0.2.1)")
    source = str(checkout) if args.theirs else os.pathsep.join([str(COMPAT.parent / "src"), str(COMPAT / "src")])
    outcomes = _run_tests(checkout, source, args.python)
    _print_tests(outcomes)
    if args.baseline:
        _print_regressions(outcomes, json.loads(Path(args.baseline).read_text())["tests"])
    lines = _example_import_lines(checkout / "examples")
    resolved = _resolve_imports(lines, source, args.python)
    print(f"\nexamples: {sum(resolved.values())} of {len(lines)} distinct import lines resolve")
    for line, ok in sorted(resolved.items()):
        if not ok and args.verbose:
            print(f"  no: {line}")
    if args.json:
        Path(args.json).write_text(json.dumps({"tests": outcomes, "imports": resolved}, indent=1))
    return 0


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a checkout of rllm-org/rllm at tag v0.2.1")
    parser.add_argument("--theirs", action="store_true", help="run against the checkout's own rllm (the baseline)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run pytest with")
    parser.add_argument("--json", help="write every outcome here")
    parser.add_argument("--baseline", help="a --theirs --json file: list the tests that pass there but not here")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the import lines that do not resolve")
    return parser.parse_args()


def _environment(source: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = source
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run_tests(checkout: Path, source: str, python: str) -> dict[str, str]:
    """Each test id -> its outcome; a file that fails to import counts as one ERROR under its own name."""
    with tempfile.TemporaryDirectory(prefix="rllm-tests-") as scratch:
        root = Path(scratch)
        for relative in TEST_PATHS:
            src, dst = checkout / relative, root / relative
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
        options = [
            "-rA",
            "-q",
            "--continue-on-collection-errors",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            scratch,
            "-o",
            "addopts=",
        ]
        command = [python, "-m", "pytest", *options, *TEST_PATHS]
        done = subprocess.run(command, check=False, cwd=root, env=_environment(source), capture_output=True, text=True)
    return _outcomes(done.stdout)


def _outcomes(report: str) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    for line in report.splitlines():
        match = _OUTCOME.match(line)
        if match and match["id"].startswith("tests/"):  # (a graded program's own pytest output is not ours)
            outcomes[match["id"]] = match["outcome"]  # an ERROR without "::": a file that failed to import
        elif skipped := _SKIPPED.match(line):
            for index in range(int(skipped["count"])):
                outcomes[f"{skipped['file']}::line{skipped['line']}#{index}"] = "SKIPPED"
    return outcomes


def _print_tests(outcomes: dict[str, str]) -> None:
    per_file: dict[str, Counter] = {}
    for test, outcome in outcomes.items():
        per_file.setdefault(test.split("::")[0], Counter())[outcome] += 1
    print(f"{'file':45} {'passed':>7} {'failed':>7} {'skipped':>8} {'error':>6}")
    total: Counter = Counter()
    for name in sorted(per_file):
        counts = per_file[name]
        total.update(counts)
        print(f"{name:45} {counts['PASSED']:7} {counts['FAILED']:7} {counts['SKIPPED']:8} {counts['ERROR']:6}")
    print(f"{'total':45} {total['PASSED']:7} {total['FAILED']:7} {total['SKIPPED']:8} {total['ERROR']:6}")


def _print_regressions(outcomes: dict[str, str], baseline: dict[str, str]) -> None:
    lost = sorted(test for test, outcome in baseline.items() if outcome == "PASSED" and outcomes.get(test) != "PASSED")
    print(f"\npass on rLLM's own code, not here: {len(lost)}")
    for test in lost:
        print(f"  {outcomes.get(test, 'MISSING')}: {test}")


def _example_import_lines(examples: Path) -> list[str]:
    """Every distinct `from rllm... import ...` statement in the examples, as one normalised line."""
    found: set[str] = set()
    for path in examples.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "rllm":
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
                found.add(f"from {node.module} import {names}")
    return sorted(found)


def _resolve_imports(lines: list[str], source: str, python: str) -> dict[str, bool]:
    """Each line run in a fresh interpreter (an import's side effects must not help the next one)."""
    probe = _PROBE
    results: dict[str, bool] = {}
    for line in lines:
        command = [python, "-c", probe, json.dumps([line])]
        done = subprocess.run(command, check=False, env=_environment(source), capture_output=True, text=True, cwd="/")
        try:
            results.update(json.loads(done.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            results[line] = False
    return results


if __name__ == "__main__":
    sys.exit(main())

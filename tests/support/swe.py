"""A tiny SWE task made on the spot (no download): package `calc` with a bug in `clamp`, and its hidden tests."""

from __future__ import annotations

from pathlib import Path

from rllm.tasks.swe.build import layout_fields
from rllm.tasks.swe.patches import diff_files

CALC = '''"""A small calculator."""


def add(a, b):
    return a + b


def clamp(x, low, high):
    # keep x within [low, high]
    if x < low:
        return low
    if x > high:
        return high
    return x
'''
BUGGY = CALC.replace("    if x > high:", "    if x >= high + 1:")
TESTS = """from calc import add, clamp


def test_add():
    assert add(2, 3) == 5


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_above():
    assert clamp(10.5, 0, 10) == 10
"""
VISIBLE_TESTS = "from calc import add\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n"


def make_calc_task(root: Path, layout: str = "flat") -> dict:
    """The row of the task, with `repo_dir` = the pristine (correct) tree under root. `layout`: "flat" (calc/ at the
    top) or "src" (src/calc/, as much of PyPI keeps its code: its tests import calc only with src/ on the path)."""
    repo = root / ("calc-repo" if layout == "flat" else f"calc-repo-{layout}")
    package = repo / "src" / "calc" if layout == "src" else repo / "calc"
    package.mkdir(parents=True)
    (repo / "tests").mkdir()
    (package / "__init__.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    (repo / "tests" / "test_visible.py").write_text(VISIBLE_TESTS)
    (repo / "setup.cfg").write_text("[tool:pytest]\n")
    source = package.relative_to(repo).as_posix()
    return {
        **layout_fields(repo),  # as `rllm swe build` writes them: test_env PYTHONPATH=src for the src layout
        "instance_id": "calc__calc-0" if layout == "flat" else f"calc__calc-{layout}-0",
        "repo": "calc",
        "version": "0",
        "base_commit": "calc-0",
        "repo_dir": str(repo),
        "problem_statement": "clamp(10.5, 0, 10) returns 10.5, but it should return 10.",
        "patch": diff_files(f"{source}/__init__.py", BUGGY, CALC),
        "test_patch": diff_files("tests/test_calc.py", None, TESTS),
        "FAIL_TO_PASS": ["tests/test_calc.py::test_clamp_above"],
        "PASS_TO_PASS": ["tests/test_calc.py::test_add", "tests/test_calc.py::test_clamp_inside"],
    }

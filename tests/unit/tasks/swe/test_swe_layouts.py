"""SWE grading on any repository layout (issue 42 §1): rows say how their tests run (`test_cmd`, `test_env`, which
`rllm swe build` writes from the layout it detects), an import error is a failed test and never "tampering", and
every protected file is put back before the tests run, so a hack scores 0 even with the submission policy off."""

from __future__ import annotations

import os

import pytest

from rllm.sandbox import Sandbox
from rllm.tasks.swe.build import layout_fields
from rllm.tasks.swe.grading import check_submission, grade, task_test_setup
from rllm.tasks.swe.patches import diff_files
from rllm.tasks.swe.rllm_swe_harness import protected_files, undo_protected
from rllm.tasks.swe.store import SWEDataError
from tests.support.swe import BUGGY, CALC, TESTS, make_calc_task


def write(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_layout_gives_the_row_its_test_fields(tmp_path):
    write(tmp_path / "flat", {"pkg/__init__.py": "", "tests/test_a.py": "", "docs/conf.py": "", "setup.py": ""})
    write(tmp_path / "src", {"src/pkg/__init__.py": "", "tests/test_a.py": ""})
    write(tmp_path / "ns", {"ns/pkg/__init__.py": "", "ns/pkg/tests/test_a.py": ""})
    write(tmp_path / "src-ns", {"src/ns/pkg/__init__.py": "", "tests/test_a.py": ""})
    write(tmp_path / "src-tests-only", {"src/tests/test_a.py": "", "mod.py": ""})
    assert layout_fields(tmp_path / "flat") == {}
    assert layout_fields(tmp_path / "src") == {"test_env": {"PYTHONPATH": "src"}}
    namespace = "pytest -o consider_namespace_packages=true"
    assert layout_fields(tmp_path / "ns") == {"test_cmd": namespace}
    assert layout_fields(tmp_path / "src-ns") == {"test_env": {"PYTHONPATH": "src"}, "test_cmd": namespace}
    assert layout_fields(tmp_path / "src-tests-only") == {}, "a src/ holding only tests is no code root"


def test_a_rows_test_fields_are_read_and_checked():
    assert task_test_setup({}) == ([], {}), "rows without the fields keep the flat layout's default"
    row = {"test_cmd": "python -m pytest -p no:doctest -o 'addopts='", "test_env": {"PYTHONPATH": "src:lib", "X": "1"}}
    assert task_test_setup(row) == (["-p", "no:doctest", "-o", "addopts="], {"PYTHONPATH": "src:lib", "X": "1"})
    for bad in (
        {"test_cmd": "tox -e py"},
        {"test_cmd": ["pytest"]},
        {"test_env": {"PYTHONPATH": "/etc"}},
        {"test_env": {"PYTHONPATH": "../up"}},
        {"test_env": {"RLLM_SWE_CANARY": "x"}},
        {"test_env": {"A": 1}},
    ):
        with pytest.raises(SWEDataError, match="test_cmd|test_env"):
            task_test_setup({"instance_id": "t", **bad})


def test_the_harness_puts_every_protected_file_back(tmp_path):
    """Changed, deleted and new protected files, and a test directory turned into a link out of it: all undone,
    while the fix to the code stays."""
    repo = tmp_path / "repo"
    write(repo, {"calc/__init__.py": BUGGY, "tests/test_calc.py": TESTS, "setup.cfg": "[tool:pytest]\n"})
    pristine = protected_files(str(repo))
    write(repo, {"calc/__init__.py": CALC, "conftest.py": "x = 1\n", "calc/evil.pth": "import os\n"})
    write(repo, {"__pycache__/conftest.cpython-311-pytest-9.2.0.pyc": "bytecode run instead of conftest.py"})
    write(repo, {"setup.cfg": "[tool:pytest]\naddopts = -p calc\n", "elsewhere/test_calc.py": "def test(): pass\n"})
    os.rename(repo / "tests", repo / "moved")
    os.symlink("elsewhere", repo / "tests")
    changed = undo_protected(str(repo), pristine)
    bytecode = "__pycache__/conftest.cpython-311-pytest-9.2.0.pyc"
    new = [bytecode, "calc/evil.pth", "conftest.py", "elsewhere/test_calc.py", "moved/test_calc.py"]
    assert changed == [*new, "setup.cfg", "tests/test_calc.py"]
    assert protected_files(str(repo)) == pristine
    assert not (repo / "tests").is_symlink() and (repo / "tests" / "test_calc.py").read_text() == TESTS
    assert (repo / "calc" / "__init__.py").read_text() == CALC
    assert "compiled bytecode" in check_submission(diff_files(bytecode, None, "x")), "the policy refuses it first"


def test_the_policy_sees_the_paths_of_a_pure_rename():
    header = "diff --git a/calc/util.py b/conftest.py\nsimilarity index 100%\n"
    rename = header + "rename from calc/util.py\nrename to conftest.py\n"  # no ---/+++ lines
    assert check_submission(rename) == "the diff changes a test file: conftest.py"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, dict]:
    Sandbox.check()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLLM_HOME", str(tmp_path_factory.mktemp("rllm-home")))
        root = tmp_path_factory.mktemp("layouts")
        yield {layout: make_calc_task(root, layout) for layout in ("flat", "src")}


def code_change(task: dict, new_source: str) -> str:
    return diff_files(task["mutation_file"], BUGGY, new_source)


@pytest.fixture(params=["flat", "src"])
def task(request, tasks) -> dict:
    row = tasks[request.param]
    source = "src/calc/__init__.py" if request.param == "src" else "calc/__init__.py"
    return {**row, "mutation_file": source}


def test_the_gold_patch_scores_1_and_an_unchanged_repository_0_on_each_layout(task):
    assert grade(task, task["patch"]).reward == 1.0
    unchanged = grade(task, code_change(task, BUGGY.replace("# keep x", "# still keep x")))
    assert (unchanged.reward, unchanged.reason) == (0.0, "tests_failed")


def test_an_import_error_is_a_failed_test_never_tampering(task):
    broken = grade(task, code_change(task, CALC + "\nimport calc_helpers_that_do_not_exist\n"))
    assert (broken.reward, broken.reason) == (0.0, "tests_failed")
    assert "No module named 'calc_helpers_that_do_not_exist'" in broken.detail
    assert broken.fail_to_pass == {"tests/test_calc.py::test_clamp_above": "missing"}


def test_a_src_layout_row_without_its_test_env_fails_its_tests_honestly(tasks):
    row = {key: value for key, value in tasks["src"].items() if key != "test_env"}
    result = grade(row, row["patch"])
    assert (result.reward, result.reason) == (0.0, "tests_failed")
    assert "No module named 'calc'" in result.detail


FORCE_PASS = """import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    report.outcome = "passed"
    return report
"""
PASS_NAMES = ("test_add", "test_clamp_inside", "test_clamp_above")
HACKS = {
    "conftest-forces-a-pass": lambda task: diff_files("conftest.py", None, FORCE_PASS),
    "tests-conftest-forces-a-pass": lambda task: diff_files("tests/conftest.py", None, FORCE_PASS),
    "early-return-in-a-test": lambda task: diff_files(
        "tests/test_calc.py", TESTS, TESTS.replace("def test_clamp_above():\n", "def test_clamp_above():\n    return\n")
    ),
    "hidden-tests-rewritten-to-pass": lambda task: diff_files(
        "tests/test_calc.py", TESTS, "".join(f"def {name}():\n    pass\n\n\n" for name in PASS_NAMES)
    ),
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_with_the_policy_off_a_hack_still_scores_0(task, hack):
    diff = HACKS[hack](task)
    assert grade(task, diff).reason == "protected_path"  # the policy refuses it first ...
    result = grade(task, diff, policy=False)  # ... and without the policy the pristine files are tested
    assert (result.reward, result.reason) == (0.0, "tampering"), result.detail
    assert "put back before the tests ran" in result.detail


def test_with_the_policy_off_the_gold_patch_still_scores_1(task):
    assert grade(task, task["patch"], policy=False).reward == 1.0


def test_the_agents_shell_finds_a_src_layout_package_as_the_grader_does(tasks):
    from rllm.tasks.swe.env import SWEEnv

    env = SWEEnv.from_dict({**tasks["src"], "step_timeout": 10})
    try:
        env.reset()
        command = {"name": "execute_bash", "arguments": {"cmd": "cd /tmp && python -m pytest -q /testbed/tests"}}
        observation, _, _, _ = env.step({"tool_calls": [{"id": "c1", **command}], "content": "", "errors": []})
    finally:
        env.close()
    assert "1 passed" in observation[0]["content"], observation[0]["content"]  # the visible test imports calc

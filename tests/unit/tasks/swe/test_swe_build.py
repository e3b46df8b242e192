"""The SWE task generator (rllm.tasks.swe.mutate, rllm.tasks.swe.build) and the shipped default task set.

The operator tests run on hand-written sources (no sandbox). `build_package` runs on inflection (a real sdist from
PyPI, tests in the bubblewrap sandbox); the shipped-set tests grade a fixed sample of the shipped rows."""

from __future__ import annotations

import ast
import json
import random
import re
from collections import Counter

import pytest

from rllm.tasks.swe.build import load_default_tasks, problem_statement, write_tasks
from rllm.tasks.swe.mutate import OPERATORS, apply_mutation, find_mutations, mutants, shuffled
from rllm.tasks.swe.patches import diff_files

SOURCE = '''"""A module with a bit of everything."""

LIMIT = 3  # module level: never mutated


def clip(values, low=0, high=LIMIT):
    # keep each value within [low, high]
    out = []
    for v in values:  # a comment after code
        if v < low or v is None:
            out.append(low)
        elif not (v <= high):
            out.append(high)
        else:
            out.append(v + 1 - 1)
    return out


class Box:
    def has(self, item, items):
        """A docstring with 1 < 2."""
        return item in items and f"{item:3}" != ""  # f-string left alone
'''

EXPECTED = {  # one edit of each operator: (operator, old line, new line)
    ("compare_flip", "        if v < low or v is None:", "        if v >= low or v is None:"),
    ("compare_flip", "        if v < low or v is None:", "        if v < low or v is not None:"),
    (
        "compare_flip",
        '        return item in items and f"{item:3}" != ""  # f-string left alone',
        '        return item not in items and f"{item:3}" != ""  # f-string left alone',
    ),
    ("bool_swap", "        if v < low or v is None:", "        if v < low and v is None:"),
    ("if_negate", "        if v < low or v is None:", "        if not (v < low or v is None):"),
    ("if_unnegate", "        elif not (v <= high):", "        elif (v <= high):"),
    ("arith_swap", "            out.append(v + 1 - 1)", "            out.append(v - 1 - 1)"),
    ("const_inc", "            out.append(v + 1 - 1)", "            out.append(v + 2 - 1)"),
    ("return_none", "    return out", "    return None"),
}


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    a, b = old.split("\n"), new.split("\n")
    assert len(a) == len(b), "a mutation never adds or removes a line"
    return [(x, y) for x, y in zip(a, b, strict=True) if x != y]


def test_each_operator_changes_one_line_and_nothing_else():
    found = mutants(SOURCE)
    assert {m.operator for m, _ in found} == set(OPERATORS)
    edits = set()
    for mutation, text in found:
        (old_line, new_line), *more = changed_lines(SOURCE, text)
        assert not more, f"{mutation} changed more than one line"
        compile(text, "m.py", "exec")
        assert text[: mutation.start] == SOURCE[: mutation.start]  # byte-identical before and after the span
        assert text[mutation.start + len(mutation.new) :] == SOURCE[mutation.end :]
        edits.add((mutation.operator, old_line, new_line))
        diff = diff_files("m.py", SOURCE, text)
        assert sum(line.startswith(("-", "+")) for line in diff.splitlines()) == 4  # ---, +++, one - and one +
    assert EXPECTED <= edits


def test_only_function_bodies_are_mutated():
    lines = SOURCE.split("\n")
    for mutation in find_mutations(SOURCE):
        text = lines[mutation.line - 1]
        assert not text.startswith(("LIMIT", "def clip")), "module level and defaults stay as they are"
        assert '"""' not in text and "f-string" not in text[: mutation.start - SOURCE.rfind("\n", 0, mutation.start)]
    assert {m.function for m in find_mutations(SOURCE)} == {"clip", "Box.has"}
    assert all(m.operator != "const_inc" or m.old != "3" for m in find_mutations(SOURCE))  # not inside the f-string


def test_negation_adds_parentheses_where_precedence_needs_them():
    source = "def f(a, b, c):\n    if a and b:\n        return 1\n    if a == b:\n        return 2\n"
    source += "    if not(c):\n        return 3\n"
    negated = {m.old: m.new for m in find_mutations(source) if m.operator == "if_negate"}
    assert negated == {"a and b": "not (a and b)", "a == b": "not a == b"}
    (unnegate,) = [m for m in find_mutations(source) if m.operator == "if_unnegate"]
    assert "    if (c):" in apply_mutation(source, unnegate)


def test_multibyte_text_and_hex_literals_keep_their_columns():
    source = 'def f(s):\n    return "é€" == s, s + "ü", 0x1f\n'
    got = {(m.operator, m.old, m.new) for m in find_mutations(source)}
    assert {("compare_flip", "==", "!="), ("arith_swap", "+", "-"), ("const_inc", "0x1f", "0x20")} <= got
    for _, text in mutants(source):
        assert len(changed_lines(source, text)) == 1


def test_bools_and_broken_sources_make_no_mutants():
    assert [m for m in find_mutations("def f():\n    return True, None\n") if m.operator == "const_inc"] == []
    assert find_mutations("def f(:\n") == []


def test_the_order_is_seeded_and_mixes_operators():
    sites = find_mutations(SOURCE)
    a, b = shuffled(list(sites), 7), shuffled(list(sites), 7)
    assert a == b and sorted(a, key=lambda m: m.start) == sorted(sites, key=lambda m: m.start)
    assert shuffled(list(sites), 8) != a
    first = {m.operator for m in a[: len(set(m.operator for m in sites))]}
    assert len(first) == len({m.operator for m in sites}), "the first round takes one site of each operator"


FAILURE = """toolz/tests/test_itertoolz.py:372: in test_partition_all
    assert raises(LookupError, lambda: list(partition_all(5, too_long_list)))
E   assert False
E    +  where False = raises(LookupError, <function test_partition_all.<locals>.<lambda> at 0x7f2d3da040e0>)"""
TRACEBACK = """tests/test_more.py:88: in test_even
    self.assertEqual(list(mi.chunked('ABCDEF', 3)), [['A', 'B', 'C'], ['D', 'E', 'F']])
more_itertools/more.py:170: in chunked
    iterator = iter(partial(take, n + 1, iter(iterable)), [])
E   AssertionError: Lists differ: [['A', 'B', 'C', 'D'], ['E', 'F']] != [['A', 'B', 'C'], ['D', 'E', 'F']]
E   seen in /testbed/tests/test_more.py and ChunkedTests"""


def test_the_problem_statement_shows_the_symptom_and_never_the_tests_or_the_code():
    words = {
        "toolz/tests/test_itertoolz.py",
        "test_itertoolz.py",
        "test_itertoolz",
        "test_partition_all",
        "tests/test_more.py",
        "test_more.py",
        "test_more",
        "ChunkedTests",
        "test_even",
    }
    text = problem_statement("toolz", [FAILURE], words)
    assert "assert raises(LookupError, lambda: list(partition_all(5, too_long_list)))" in text
    assert "where False = raises(LookupError, <function <lambda> at 0x...>)" in text
    text = problem_statement("more-itertools", [TRACEBACK], words)
    assert "Lists differ: [['A', 'B', 'C', 'D'], ['E', 'F']]" in text
    assert "mi.chunked('ABCDEF', 3)" in text
    for leak in [*words, "/testbed", "more.py", "n + 1", "0x7f2d"]:
        assert leak not in problem_statement("toolz", [FAILURE], words)
        assert leak not in text, leak
    assert "misbehaves" in problem_statement("toolz", ["no E lines at all"], words)
    helper = (
        "tests/test_queueutils.py:12: in test_heap_queue\n    _test_priority_queue(HeapPriorityQueue)\nE   TypeError: x"
    )
    text = problem_statement("boltons", [helper], set())  # a test helper's name is not shown either
    assert "TypeError: x" in text and "_test_priority_queue" not in text and "test_heap_queue" not in text


def test_the_problem_statement_prefers_a_failure_that_says_more():
    informative = "E   ValueError: width must be positive, got -1"
    text = problem_statement("pkg", ["E   assert False", informative], set())
    assert "width must be positive" in text and "assert False" not in text


SWE_BENCH_KEYS = {
    "instance_id",
    "repo",
    "version",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
}


@pytest.fixture(scope="module")
def inflection_rows():
    from rllm.sandbox import Sandbox
    from rllm.tasks.swe.build import build_package

    Sandbox.check()
    first = build_package("inflection", "0.5.1", seed=3, per_package=2, jobs=2)
    second = build_package("inflection", "0.5.1", seed=3, per_package=2, jobs=1)
    return first, second


def test_build_package_makes_swe_bench_rows_reproducibly(inflection_rows, tmp_path):
    (rows, report), (again, _) = inflection_rows
    assert len(rows) == 2 and report.kept == 2 and report.tried >= 2
    assert rows == again, "same package and seed (and any number of jobs) give the same rows"
    for row in rows:
        assert SWE_BENCH_KEYS <= set(row)
        assert 1 <= len(row["FAIL_TO_PASS"]) <= 20 and not set(row["FAIL_TO_PASS"]) & set(row["PASS_TO_PASS"])
        assert row["instance_id"].startswith("inflection__inflection-0.5.1__")
        assert row["split"] == "train" and row["created_by"] == "rllm swe build 3"
        assert row["sdist"]["filename"] == "inflection-0.5.1.tar.gz"
        assert row["test_patch"].startswith("diff --git a/test_inflection.py b/test_inflection.py\nnew file mode")
        assert "test_" not in row["problem_statement"] and "/testbed" not in row["problem_statement"]
        assert row["mutation"]["file"] == "inflection/__init__.py" and row["difficulty"] > 0
    write_tasks(rows, tmp_path / "a.jsonl")
    write_tasks(list(reversed(again)), tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_the_shipped_set():
    rows = load_default_tasks()
    assert len(rows) >= 200
    assert len({r["instance_id"] for r in rows}) == len(rows)
    assert [r["instance_id"] for r in rows] == sorted(r["instance_id"] for r in rows)
    splits: dict[str, set[str]] = {}
    for row in rows:
        splits.setdefault(row["repo"], set()).add(row["split"])
        assert SWE_BENCH_KEYS <= set(row) and 1 <= len(row["FAIL_TO_PASS"]) <= 20
        assert all(re.match(r"^[\w/.-]+\.py::", t) for t in row["FAIL_TO_PASS"] + row["PASS_TO_PASS"])
        ast.parse(row["mutation"]["function"].replace(".<locals>", "").split(".")[-1])
    assert len(splits) >= 5 and all(len(s) == 1 for s in splits.values()), "each package is in one split"
    assert {s for (s,) in splits.values()} == {"train", "validation"}
    assert load_default_tasks("validation") and len(load_default_tasks("train")) + len(
        load_default_tasks("validation")
    ) == len(rows)
    with pytest.raises(ValueError, match="splits"):
        load_default_tasks("test")
    assert json.dumps(rows[0])


def test_a_sample_of_the_shipped_tasks_is_solved_by_its_patch_and_fails_unchanged():
    from rllm.sandbox import Sandbox
    from rllm.tasks.swe.grading import grade, run_tests
    from rllm.tasks.swe.store import task_trees

    Sandbox.check()
    rows = load_default_tasks()
    for row in random.Random(0).sample(rows, 5):
        assert grade(row, row["patch"]).reward == 1.0, row["instance_id"]
        _, full = task_trees(row)
        run = run_tests(full, row["FAIL_TO_PASS"])  # the unchanged (buggy) repository
        assert all(run.outcomes.get(t) in ("failed", "error") for t in row["FAIL_TO_PASS"]), row["instance_id"]


def test_a_statement_names_the_call_what_it_returns_and_what_it_should(tmp_path):
    from rllm.sandbox import Sandbox
    from rllm.tasks.swe.statements import restate
    from tests.support.swe import make_calc_task

    Sandbox.check()
    text = restate(make_calc_task(tmp_path))["problem_statement"]  # the hidden tests, traced with and without the bug
    assert "```python\nclamp(10.5, 0, 10)\n```\n\nnow returns\n\n```\n10.5\n```" in text
    assert "but it should return\n\n```\n10\n```" in text
    assert "test_" not in text and "high + 1" not in text


def test_a_difference_that_would_show_a_test_is_passed_over_and_an_opaque_call_comes_last():
    leaky = {"call": "run(helper_of_test_sum)", "got": ("returns", "1"), "expected": ("returns", "2")}
    clean = {"call": "total([1, 2])", "got": ("raises", "KeyError: 0"), "expected": ("returns", "3")}
    other = {"call": "total([])", "got": ("returns", "None"), "expected": ("returns", "0")}
    opaque = {
        "call": "check(<function <lambda> at 0x7f0012345678>)",
        "got": ("returns", "0"),
        "expected": ("returns", "1"),
    }
    differences = [leaky, opaque, clean, other, clean]
    text = problem_statement("pkg", ["E   assert 1 == 2"], {"helper_of_test_sum"}, differences)
    assert statement_parts(text) == ("total([1, 2])", "KeyError: 0", "3") and "helper" not in text
    assert (
        "changed:\n\n- `total([])` now returns `None` but it should return `0`\n- `check(<function <lambda> at" in text
    )
    assert text.count("total([1, 2])") == 1  # a difference seen twice is shown once


def statement_parts(text: str) -> tuple[str, str, str] | None:
    """(call, what it gives now, what it should give) of a statement that describes a call, else None."""
    fence = "`{3,4}"
    pattern = (
        rf"This call\n\n{fence}python\n(.+?)\n{fence}\n\nnow (?:returns|raises|yields)\n\n{fence}\n(.*?)\n{fence}\n\n"
        rf"but it should (?:return|raise|yield)\n\n{fence}\n(.*?)\n{fence}\n"
    )
    found = re.search(pattern, text, re.S)
    return found.groups() if found else None


def test_every_shipped_statement_describes_its_own_failure():
    rows = load_default_tasks()
    statements = Counter(r["problem_statement"] for r in rows)
    assert [s for s, n in statements.items() if n > 1] == []
    described, unnamed = 0, []
    for row in rows:
        text, tests = row["problem_statement"], row["test_patch"]
        if parts := statement_parts(text):  # the call, what it gives now, what it should give
            call, got, expected = parts
            assert got != expected, row["instance_id"]
            # a call the hidden tests make: a name it is written with is in them (not so for a function the package
            # made, such as `memoize`'s wrapper `memof`, which the tests call by their own name)
            if not any(name in tests for name in names_in(call)):
                unnamed.append((row["instance_id"], call))
            described += 1
            continue
        # no call into the package differs (the test fails on an object's state): the test's failing line and
        # pytest's report of it, never a bare AssertionError
        found = re.search(
            r"This used to work:\n\n```python\n(.+?)\n```\n\nand now fails with\n\n```\n(.+?)\n```", text, re.S
        )
        assert found and found.group(1) in tests and found.group(2) != "AssertionError", (row["instance_id"], text)
    assert described >= 0.9 * len(rows), f"only {described} of {len(rows)} statements describe a call"
    assert len(unnamed) <= 0.03 * len(rows), unnamed


def names_in(call: str) -> set[str]:
    """The names a call is written with (`Stats`, `pearson_type` of `Stats([1]).pearson_type`), builtins left out."""
    import builtins

    return set(re.findall(r"[A-Za-z_]\w{2,}", call)) - set(dir(builtins))


TRACED_PACKAGE = """import textwrap


class Stats:
    def __init__(self, data):
        self.data = data

    @property
    def size(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i]

    def total(self, start=0, *, scale=1):
        return (sum(self.data) + start) * scale


def chunks(xs, n):
    try:
        if n < 1:
            raise ValueError("n must be positive")
        yield from (xs[i : i + n] for i in range(0, len(xs), n))
    except TypeError:
        yield "never"


def parse(text):
    try:
        return int(text)
    except ValueError:
        return None


class Wrapper(textwrap.TextWrapper):
    def _wrap_chunks(self, chunks):
        return ["".join(chunks).upper()]
"""
TRACED_TESTS = """import pytest
from pkg import Stats, Wrapper, chunks, parse


def test_calls():
    s = Stats([1, 2])
    assert (s.size, s[1], s.total(3, scale=2), parse("x")) == (2, 2, 12, None)
    assert list(chunks([1, 2, 3], 2)) == [[1, 2], [3]]
    with pytest.raises(ValueError):
        list(chunks([1], 0))
    assert Wrapper(width=5).wrap("ab cd") == ["AB CD"]
"""


def test_the_tracer_records_calls_as_a_user_writes_them(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(TRACED_PACKAGE)
    (tmp_path / "tests" / "test_pkg.py").write_text(TRACED_TESTS)
    from rllm.tasks import swe

    plugin_dir = Path(swe.__file__).parent  # the pytest plugins run by path, beside the package's modules
    script = "\n".join(
        [
            "import json, pytest, rllm_swe_trace",
            "pytest.main(['-q', '-p', 'rllm_swe_trace', '-p', 'no:cacheprovider', 'tests'])",
            "print(json.dumps(rllm_swe_trace.TRACES))",
        ]
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{plugin_dir}:{tmp_path}", "RLLM_SWE_TRACE_ROOT": str(tmp_path)}
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, check=False, cwd=tmp_path, env=env, capture_output=True, text=True)
    (events,) = json.loads(done.stdout.splitlines()[-1]).values()
    assert [(e["call"], e.get("returns", e.get("raises", e.get("yields")))) for e in events] == [
        ("Stats([1, 2])", "None"),
        ("Stats([1, 2]).size", "2"),
        ("Stats([1, 2])[1]", "2"),
        ("Stats([1, 2]).total(3, scale=2)", "12"),
        ("parse('x')", "None"),  # an exception caught inside is not the call's
        ("chunks([1, 2, 3], 2)", ["[1, 2]", "[3]"]),
        ("chunks([1], 0)", "ValueError: n must be positive"),  # raised through an `except` that did not match
        ("Wrapper(5).wrap('ab cd')", "['AB CD']"),  # the standard library's method, the package's code under it
    ]

"""rLLM's code rows, read as rllm's own code tests (`rllm.rewards.code`), so that every format grades in rllm's
sandbox through its one test runner.

rLLM keys the test format on `task_info["data_source"]`; `ground_truth` holds the tests, as a JSON string or as
data. What each source's rows look like, and what they become here:

- `taco`, `apps`, `code_contests`: `{"inputs": [...], "outputs": [...]}`, plus `"fn_name"` for call-based rows.
  Without `fn_name`: stdin/stdout cases. With it: calls `fn_name(*args)`, where an input is the argument list (or a
  string of one JSON value per line) and an output is unwrapped once when it is a list, as rLLM does (APPS stores
  `[[True], ...]` for functions returning `True`).
- `livecodebench`, `codeforces`, `primeintellect`: a list of `{"input", "output", "testtype"?, "metadata"?}`. A
  first case with `"testtype": "functional"` makes every case a call of `metadata["func_name"]` (or the case's own
  `"fn_name"`, as PrimeIntellect's raw rows have it) with one JSON argument per input line and a JSON output;
  otherwise stdin/stdout. A `Solution` class (LeetCode style) is instantiated and its method called.
- `leetcode`: `{"functional": "def check(candidate): ...\\ncheck(Solution().method)"}`, and `humanevalplus`: the
  EvalPlus test source, `def check(candidate): ...` ending in `check(entry_point)`. Both become rllm's `humaneval`
  format: the trailing call is taken off and names the candidate; `check` then runs in the runner's trusted
  namespace. The LeetCode helpers the tests use (`ListNode`, `TreeNode`, `list_node`, `tree_node`, `is_same_list`,
  `is_same_tree`) are defined for both sides, and EvalPlus's `import numpy as np` gets a pure-Python stand-in for the
  few numpy names its `assertion` helper uses (the sandbox runs the standard library only). One limit: the candidate's
  return values must be plain data (a returned `ListNode` fails), which is how rllm's runner stops reward hacks.
- `kodcode`: a pytest file that does `from solution import ...`; `rllm.compat.rewards.pytest_rows` runs it with
  pytest inside the sandbox, not through rllm's test runner.

Differences from rLLM that a grade can show: stdout is compared by rllm's rules (trailing spaces and blank lines
ignored, numbers with a '.' within 1e-6; rLLM also strips leading spaces and compares numbers exactly as decimals),
and float return values match within 1e-6. Solutions get a standard-library prelude (`STDLIB_PRELUDE`: typing,
collections, itertools, ... and their common names), as rLLM prepends its own imports; numpy and pandas are not
there.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from rllm.errors import RllmError
from rllm.rewards.code import MalformedTestsError

__all__ = ["STDLIB_PRELUDE", "CodeGrading", "UnsupportedCodeRowError", "grading_for", "with_prelude"]

STDIO_SOURCES = frozenset({"taco", "apps", "code_contests"})
CASE_LIST_SOURCES = frozenset({"livecodebench", "codeforces", "primeintellect"})
CHECK_SOURCES = frozenset({"leetcode", "humanevalplus"})
PER_TEST_TIMEOUT_S = 6.0  # rLLM's LiveCodeBench timeout per test
MAX_TOTAL_TIMEOUT_S = 180.0  # rLLM has none: one row must not hold a sandbox slot for ever
CHECK_TIMEOUT_S = 30.0  # one `check(candidate)` run (leetcode / humanevalplus)
_CANDIDATE = "_rllm_candidate"
_FUTURE_IMPORT = re.compile(r"^from[ \t]+__future__[ \t]+import[^\n]*\n?", re.MULTILINE)

STDLIB_PRELUDE = """\
import bisect, collections, copy, functools, heapq, itertools, math, operator, random, re, string, sys
from bisect import bisect_left, bisect_right, insort
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cache, cmp_to_key, lru_cache, reduce
from heapq import heapify, heappop, heappush, heappushpop
from itertools import accumulate, chain, combinations, permutations, product
from math import ceil, comb, floor, gcd, inf, isqrt, log, sqrt
from typing import *
"""

LEETCODE_HELPERS = """
class ListNode:
    def __init__(self, val=0, next=None):
        self.val, self.next = val, next


class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val, self.left, self.right = val, left, right


def list_node(values):
    head = None
    for value in reversed(list(values)):
        head = ListNode(value, head)
    return head


def is_same_list(a, b):
    while a is not None and b is not None:
        if a.val != b.val:
            return False
        a, b = a.next, b.next
    return a is None and b is None


def tree_node(values):
    values = list(values)
    if not values or values[0] is None:
        return None
    root = TreeNode(values[0])
    level, position = deque([root]), 1
    while level and position < len(values):
        node = level.popleft()
        for side in ("left", "right"):
            if position < len(values) and values[position] is not None:
                child = TreeNode(values[position])
                setattr(node, side, child)
                level.append(child)
            position += 1
    return root


def is_same_tree(a, b):
    if a is None or b is None:
        return a is b
    return a.val == b.val and is_same_tree(a.left, b.left) and is_same_tree(a.right, b.right)
"""

# What EvalPlus's test helpers use of numpy (`ndarray` for isinstance, `allclose`, `testing.assert_allclose`),
# with numpy's tolerance rule |a - b| <= atol + rtol * |b|, elementwise over nested sequences.
NUMPY_STAND_IN = """
import math as _math
import types as _types


class _NoArray:
    pass


def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        a = list(a) if isinstance(a, (list, tuple)) else [a] * len(b)
        b = list(b) if isinstance(b, (list, tuple)) else [b] * len(a)
        return len(a) == len(b) and all(_allclose(x, y, rtol, atol, equal_nan) for x, y in zip(a, b))
    a, b = float(a), float(b)
    if _math.isnan(a) or _math.isnan(b):
        return equal_nan and _math.isnan(a) and _math.isnan(b)
    return a == b or abs(a - b) <= atol + rtol * abs(b)


def _assert_allclose(actual, desired, rtol=1e-07, atol=0, equal_nan=True, err_msg="", verbose=True):
    assert _allclose(actual, desired, rtol, atol, equal_nan), f"{actual!r} is not close to {desired!r} {err_msg}"


np = _types.SimpleNamespace(
    ndarray=_NoArray, float64=float, float32=float, allclose=_allclose,
    isclose=_allclose, testing=_types.SimpleNamespace(assert_allclose=_assert_allclose),
)
"""


class UnsupportedCodeRowError(RllmError, NotImplementedError):
    """A row whose tests rllm cannot grade (a `NotImplementedError`, as rLLM raises for an unknown source)."""


@dataclass(frozen=True)
class CodeGrading:
    """How to grade one row: rllm's tests, and what to put around the model's code."""

    tests: dict
    prelude: str = STDLIB_PRELUDE
    epilogue: str = ""
    per_test_timeout_s: float = PER_TEST_TIMEOUT_S
    total_timeout_s: float = CHECK_TIMEOUT_S

    def program(self, code: str) -> str:
        return with_prelude(code, self.prelude) + self.epilogue


def with_prelude(code: str, prelude: str = STDLIB_PRELUDE) -> str:
    """`prelude` before `code`, below the code's `from __future__` imports (which must come first in a module)."""
    future = "".join(_FUTURE_IMPORT.findall(code))
    return f"{future}{prelude}{_FUTURE_IMPORT.sub('', code)}"


def grading_for(data_source: str, tests: Any) -> CodeGrading:
    """The grading of a row from `data_source` whose `ground_truth` is `tests`; UnsupportedCodeRowError for a source
    rllm does not grade, MalformedTestsError (a ValueError) for tests it cannot read."""
    tests = _loaded(tests)
    if data_source in STDIO_SOURCES or data_source in CASE_LIST_SOURCES:
        if isinstance(tests, dict) and "inputs" in tests:
            return _cases_grading(_taco_cases(tests), tests.get("fn_name"))
        if isinstance(tests, list) and tests:
            return _cases_grading(*_listed_cases(tests))
        raise MalformedTestsError(f"{data_source} tests must be {{'inputs', 'outputs'}} or a non-empty list of cases")
    if data_source == "leetcode":
        if not isinstance(tests, dict) or not isinstance(tests.get("functional"), str):
            raise MalformedTestsError("leetcode tests must be {'functional': 'def check(candidate): ...'}")
        return _check_grading(tests["functional"], STDLIB_PRELUDE + LEETCODE_HELPERS)
    if data_source == "humanevalplus":
        if not isinstance(tests, str):
            raise MalformedTestsError("humanevalplus tests must be the test source (def check(candidate): ...)")
        return _check_grading(tests, STDLIB_PRELUDE)
    if data_source == "kodcode":
        raise UnsupportedCodeRowError("kodcode rows are pytest files: rllm.compat.rewards.pytest_rows runs them")
    raise UnsupportedCodeRowError(
        f"code rows from data_source {data_source!r} are not graded; use one of "
        f"{sorted(STDIO_SOURCES | CASE_LIST_SOURCES | CHECK_SOURCES | {'kodcode'})}, or rllm.rewards.code.code_reward"
    )


def _loaded(tests: Any) -> Any:
    """Tests stored as a JSON string (DeepCoder's rows) as data; a string that is not JSON is left as it is (a
    test source)."""
    if isinstance(tests, str) and tests.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(tests)
        except json.JSONDecodeError:
            return tests
    return tests


# ------------------------------------------------------------------------------------- stdin/stdout and calls


def _taco_cases(tests: dict) -> list[tuple[Any, Any]]:
    """(input, output) pairs; as rLLM does, a shorter list reuses its first item and a list output is unwrapped."""
    inputs, outputs = tests.get("inputs") or [], tests.get("outputs") or []
    count = max(len(inputs), len(outputs))
    pairs = []
    for i in range(count):
        given = inputs[i] if i < len(inputs) else (inputs[0] if inputs else "")
        wanted = outputs[i] if i < len(outputs) else (outputs[0] if outputs else "")
        pairs.append((given, wanted[0] if isinstance(wanted, list) and wanted else wanted))
    return pairs


def _listed_cases(cases: list) -> tuple[list[tuple[Any, Any]], str | None]:
    first = cases[0] if isinstance(cases[0], dict) else {}
    fn_name = first.get("fn_name")
    if first.get("testtype") == "functional":
        fn_name = (first.get("metadata") or {}).get("func_name") or fn_name
        if not fn_name:
            raise MalformedTestsError("functional tests need metadata['func_name'] (the function to call)")
    for i, case in enumerate(cases):
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            raise MalformedTestsError(f"case {i} must be a dict with 'input' and 'output', got {str(case)[:200]}")
    return [(case["input"], case["output"]) for case in cases], fn_name


def _cases_grading(pairs: list[tuple[Any, Any]], fn_name: str | None) -> CodeGrading:
    if fn_name:
        cases = [{"args": _call_args(given), "output": _json_value(wanted)} for given, wanted in pairs]
        tests = {"format": "call", "fn_name": fn_name, "cases": cases}
    else:
        cases = [{"input": _text(given), "output": _text(wanted)} for given, wanted in pairs]
        tests = {"format": "stdio", "cases": cases}
    total = min(MAX_TOTAL_TIMEOUT_S, (PER_TEST_TIMEOUT_S + 1) * len(pairs) + 5)  # rLLM's global timeout
    return CodeGrading(tests, per_test_timeout_s=PER_TEST_TIMEOUT_S, total_timeout_s=total)


def _call_args(given: Any) -> list:
    """An argument list: given as one, or as a string of one JSON value per line (LiveCodeBench)."""
    if isinstance(given, list):
        return given
    if isinstance(given, str):
        return [_json_value(line) for line in given.split("\n") if line.strip()]
    return [given]


def _json_value(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value  # a bare string answer (rLLM would fail the row here)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(map(str, value))
    return value if isinstance(value, str) else str(value)


# ------------------------------------------------------------------------------------- check(candidate) sources


def _check_grading(source: str, prompt: str) -> CodeGrading:
    """rllm's humaneval format from a test source that ends in `check(<candidate>)`."""
    try:
        body = ast.parse(source).body
    except SyntaxError as exc:
        raise MalformedTestsError(f"the test source does not parse: {exc}") from None
    last = body[-1] if body else None
    call = last.value if isinstance(last, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "check"):
        raise MalformedTestsError("the test source must end with check(<the function under test>)")
    if len(call.args) != 1 or call.keywords:
        raise MalformedTestsError("the test source's last line must call check with one argument")
    test = "\n".join(source.splitlines()[: last.lineno - 1])
    test = _with_numpy_stand_in(test)
    candidate = call.args[0]
    if isinstance(candidate, ast.Name):
        tests = {"format": "humaneval", "prompt": prompt, "test": test, "entry_point": candidate.id}
        return CodeGrading(tests, prelude="", total_timeout_s=CHECK_TIMEOUT_S, per_test_timeout_s=CHECK_TIMEOUT_S)
    # an expression such as Solution().method: a function of the solution's module calls it
    expression = ast.get_source_segment(source, candidate)
    epilogue = f"\n\n\ndef {_CANDIDATE}(*args, **kwargs):\n    return ({expression})(*args, **kwargs)\n"
    tests = {"format": "humaneval", "prompt": prompt, "test": test, "entry_point": _CANDIDATE}
    return CodeGrading(
        tests, prelude="", epilogue=epilogue, total_timeout_s=CHECK_TIMEOUT_S, per_test_timeout_s=CHECK_TIMEOUT_S
    )


def _with_numpy_stand_in(test: str) -> str:
    lines = test.splitlines()
    if not any(line.strip() == "import numpy as np" for line in lines):
        return test
    return "\n".join(NUMPY_STAND_IN if line.strip() == "import numpy as np" else line for line in lines)

"""Code reward: the test formats, the runner's limits, HumanEval end to end, and the reward hacks it must refuse.

Everything here runs model-written code in the real bubblewrap sandbox (`make sandbox` installs it)."""

from __future__ import annotations

import base64
import json
import pickle
import secrets
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from rllm.rewards.code import (
    MalformedTestsError,
    code_reward,
    extract_code,
    feedback_text,
    normalise_tests,
    run_code_tests,
)
from rllm.tasks.code import MalformedCodeRowError, code_prompt, load_code_rows, make_code_tasks
from rllm.tasks.humaneval import load_humaneval, make_humaneval_tasks

ADD = {"format": "stdio", "cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "10 -4\n", "output": "6"}]}
ADD_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
DOUBLE = {"format": "call", "fn_name": "double", "cases": [{"args": [2], "output": 4}, {"args": [-3], "output": -6}]}


@pytest.fixture(scope="module")
def sandbox():
    from rllm.sandbox import Sandbox

    Sandbox.check()  # fails, naming what to install, rather than skipping: these tests are the reward's guarantee
    return Sandbox(max_workers=2)


@pytest.fixture(scope="module")
def humaneval():
    return {row["id"]: row for row in load_humaneval()}


def _run(sandbox, code, tests, **kwargs):
    return run_code_tests(code, tests, sandbox=sandbox, **kwargs)


# ------------------------------------------------------------------------------------------------------ HumanEval


def test_every_humaneval_canonical_solution_passes(sandbox, humaneval):
    rows = list(humaneval.values())
    start = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda r: _run(sandbox, r["canonical_solution"], r["tests"]), rows))
    elapsed = time.monotonic() - start
    failed = {r["id"]: res.first_failure or res.error for r, res in zip(rows, results, strict=True) if not res.passed}
    assert len(rows) == 164 and failed == {}
    print(f"HumanEval: {len(rows) - len(failed)}/{len(rows)} canonical solutions pass in {elapsed:.1f} s")


@pytest.mark.parametrize(
    "task_id, body",
    [
        ("HumanEval/0", "    return True\n"),
        ("HumanEval/2", "    return round(number)\n"),
        ("HumanEval/4", "    return 0.0\n"),
    ],
)
def test_wrong_humaneval_solutions_fail_with_the_failed_assert(sandbox, humaneval, task_id, body):
    result = _run(sandbox, body, humaneval[task_id]["tests"])
    assert not result.passed and result.passed_tests == 0 and result.total_tests == 1
    assert result.first_failure.startswith("test 1: wrong answer: assert ") and "candidate(" in result.first_failure
    assert "AssertionError" in feedback_text(result) and "candidate(" in feedback_text(result)


def test_humaneval_full_function_completion_replaces_the_prompt_stub(sandbox, humaneval):
    row = humaneval["HumanEval/0"]
    code = "def has_close_elements(numbers, threshold):\n" + row["canonical_solution"]
    assert _run(sandbox, code, row["tests"]).passed
    assert code_reward(row, f"Here:\n```python\nfrom typing import List\n\n{code}```").reward == 1.0


def test_syntax_error_fails_with_a_useful_first_failure(sandbox):
    result = _run(sandbox, "def f(:\n    pass\n", ADD)
    assert not result.passed and result.details[0]["status"] == "syntax_error"
    assert result.first_failure.startswith("test 1: syntax error at line 1: SyntaxError")
    assert "Input:" not in feedback_text(result) and "SyntaxError" in feedback_text(result)


# ---------------------------------------------------------------------------------------------------------- stdio


def test_stdio_pass_ignores_trailing_whitespace(sandbox):
    result = _run(sandbox, ADD_PROGRAM.replace("print(a + b)", "print(a + b, end='  \\n\\n')"), ADD)
    assert result.passed and (result.passed_tests, result.total_tests) == (2, 2) and result.first_failure is None


def test_stdio_wrong_answer_feedback_shows_input_expected_and_output(sandbox):
    result = _run(sandbox, ADD_PROGRAM.replace("a + b", "a * b"), ADD)
    assert not result.passed and result.passed_tests == 0 and result.first_failure == "test 1: wrong answer"
    text = feedback_text(result)
    assert "Input:\n1 2" in text and "Expected output:\n3" in text and "Your output:\n2" in text
    assert len(text) <= 1000


def test_stdio_runtime_error_feedback_is_the_traceback_tail(sandbox):
    result = _run(sandbox, "x = int(input().split()[0])\nprint(x // 0)\n", ADD)
    assert result.details[0]["status"] == "runtime_error"
    assert result.first_failure == "test 1: runtime error: ZeroDivisionError: integer division or modulo by zero"
    assert 'File "<solution>", line 2' in feedback_text(result) and "code_runner" not in feedback_text(result)


def test_per_test_timeout_kills_an_infinite_loop_promptly(sandbox):
    start = time.monotonic()
    result = _run(sandbox, "while True:\n    pass\n", ADD, per_test_timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert not result.passed and result.details[0]["status"] == "timeout" and "time limit" in result.first_failure
    assert elapsed < 1.0 + 3.0, elapsed


def test_total_timeout_stops_the_run(sandbox):
    cases = [{"input": f"{i}\n", "output": f"{i}\n"} for i in range(20)]
    start = time.monotonic()
    result = _run(
        sandbox,
        "import time\ntime.sleep(0.4)\nprint(input())\n",
        {"format": "stdio", "cases": cases},
        per_test_timeout_s=2.0,
        total_timeout_s=1.5,
    )
    elapsed = time.monotonic() - start
    assert not result.passed and 2 <= result.passed_tests <= 4 and result.total_tests == 20
    assert "total time limit" in result.first_failure and elapsed < 1.5 + 3.0, elapsed


def test_float_tolerance_is_token_wise_and_integers_stay_exact(sandbox):
    floats = {"format": "stdio", "cases": [{"input": "", "output": "0.3 1.0\n"}]}
    assert _run(sandbox, "print(0.1 + 0.2, 1)", floats).passed
    assert not _run(sandbox, "print(0.1 + 0.2, 1)", {**floats, "float_tol": None}).passed
    big = {"format": "stdio", "cases": [{"input": "", "output": "10000000000000000001\n"}]}
    assert not _run(sandbox, "print(10000000000000000000)", big).passed


def test_output_limit(sandbox):
    assert _run(sandbox, "print('x' * (3 << 20))", ADD).details[0]["status"] == "output_limit"
    huge = _run(sandbox, "def double(x):\n    return list(range(400_000))\n", DOUBLE)  # a report over the cap
    assert huge.details[0]["status"] == "output_limit" and "JSON" in huge.first_failure


# ----------------------------------------------------------------------------------------------------- call style


def test_call_format_pass_and_fail(sandbox):
    assert _run(sandbox, "def double(x):\n    return 2 * x\n", DOUBLE).passed
    result = _run(sandbox, "def double(x):\n    return x + 2\n", DOUBLE, stop_at_first_failure=False)
    assert (result.passed, result.passed_tests, result.total_tests) == (False, 1, 2)
    assert "Call: double(-3)" in feedback_text(result) and "Expected output:\n-6" in feedback_text(result)


def test_call_format_accepts_leetcode_solution_class_and_apps_wrapped_outputs(sandbox):
    code = (
        "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], i]\n            seen[x] = i\n"
    )
    tests = {"fn_name": "twoSum", "inputs": [[[2, 7, 11, 15], 9], [[3, 2, 4], 6]], "outputs": [[[0, 1]], [[1, 2]]]}
    assert _run(sandbox, code, tests).passed  # the APPS shorthand: outputs wrapped in a one-element list
    missing = _run(sandbox, "def other():\n    pass\n", DOUBLE)
    assert missing.details[0]["status"] == "missing_function" and "double" in missing.first_failure


def test_solution_module_is_a_real_module(sandbox):
    dataclass_code = (
        "from __future__ import annotations\nfrom dataclasses import dataclass\n@dataclass\nclass P:\n"
        "    x: int\ndef double(x):\n    return P(2 * x).x\n"
    )
    assert _run(sandbox, dataclass_code, DOUBLE).passed  # dataclasses look the class's module up in sys.modules


def test_an_exception_that_cannot_be_printed_is_still_a_plain_failure(sandbox):
    code = (
        "class E(Exception):\n    def __str__(self):\n        raise RuntimeError\n    __repr__ = __str__\nraise E()\n"
    )
    result = _run(sandbox, code, ADD, stop_at_first_failure=False)
    assert [d["status"] for d in result.details] == ["runtime_error"] * 2 and result.error is None


def test_tuples_read_as_lists_and_floats_within_tolerance(sandbox):
    tests = {"format": "call", "fn_name": "f", "cases": [{"args": [], "output": [0.3, [1, "a"]]}]}
    assert _run(sandbox, "def f():\n    return (0.1 + 0.2, (1, 'a'))\n", tests).passed


# ---------------------------------------------------------------------------------------------------- reward hacks

ALWAYS_EQUAL = "class Anything:\n    def __eq__(self, other):\n        return True\n    __ne__ = lambda s, o: False\n"


def test_always_equal_object_fails_in_call_format(sandbox):
    result = _run(sandbox, ALWAYS_EQUAL + "def double(x):\n    return Anything()\n", DOUBLE)
    assert not result.passed and result.details[0]["status"] == "unserializable"
    subclass = "class Int(int):\n    def __eq__(self, other):\n        return True\ndef double(x):\n    return Int(0)\n"
    assert not _run(sandbox, subclass, DOUBLE).passed  # an int subclass is read as the int it holds


def test_always_equal_object_fails_in_humaneval_format(sandbox, humaneval):
    row = humaneval["HumanEval/0"]
    result = _run(
        sandbox, ALWAYS_EQUAL + "def has_close_elements(numbers, threshold):\n    return Anything()\n", row["tests"]
    )
    assert not result.passed and result.details[0]["status"] == "unserializable"
    subclass = "class B(float):\n    __eq__ = lambda s, o: True\ndef truncate_number(n):\n    return B(7)\n"
    assert not _run(sandbox, subclass, humaneval["HumanEval/2"]["tests"]).passed


@pytest.mark.parametrize("fmt", ["stdio", "call", "humaneval"])
def test_exiting_at_import_fails(sandbox, humaneval, fmt):
    tests = {"stdio": ADD, "call": DOUBLE, "humaneval": humaneval["HumanEval/0"]["tests"]}[fmt]
    for exit_code in (0, 1):
        result = _run(sandbox, f"import os\nos._exit({exit_code})\n", tests)
        assert not result.passed and result.details[0]["status"] == "no_report", result


def test_printing_a_success_verdict_earns_nothing(sandbox, humaneval):
    fake = json.dumps({"runner": "rllm-code-runner/1", "passed": True, "tests": [{"passed": True}] * 3})
    code = (
        f"import sys\nprint({fake!r})\nprint('ALL TESTS PASSED')\nprint({fake!r}, file=sys.stderr)\n"
        "print('ALL TESTS PASSED', file=sys.stderr)\nsys.exit(0)\n"
    )
    for tests in (ADD, DOUBLE, humaneval["HumanEval/0"]["tests"]):
        assert not _run(sandbox, code, tests).passed


def test_writing_to_the_result_channel_is_impossible(sandbox):
    forged = b'{"runner": "rllm-code-runner/1", "passed": true, "tests": [{"passed": true}]}'
    code = (
        "import os\nfor path in (3, '/proc/%d/fd/3' % os.getppid(), '/proc/1/fd/3', '/proc/%d/mem' % os.getppid()):\n"
        "    try:\n        fd = path if isinstance(path, int) else os.open(path, os.O_RDWR)\n"
        f"        os.write(fd, {forged!r})\n        print('wrote', path)\n"
        "    except OSError as exc:\n        print('refused', exc.errno)\n"
    )
    result = _run(sandbox, code, ADD)
    assert not result.passed and result.details[0]["status"] == "wrong_answer" and result.error is None
    assert result.details[0]["got"] == "refused 9\nrefused 13\nrefused 13\nrefused 13\n"  # EBADF, then EACCES


def test_a_forged_report_without_the_nonce_is_rejected(sandbox):
    code = (
        "import os\nfor fd in range(3, 64):\n    try:\n"
        '        os.write(fd, b\'{"status": "ok", "value": 4}\\n\')\n    except OSError:\n        pass\n'
        "os._exit(0)\n"
    )
    result = _run(sandbox, code, DOUBLE)
    assert not result.passed and result.details[0]["status"] == "bad_report"


def test_expected_outputs_are_out_of_reach(sandbox):
    secret = {"format": "stdio", "cases": [{"input": "x\n", "output": "the-" + "secret-answer\n"}]}
    code = (
        "import gc, os\nkey = '-'.join(['the', 'secret', 'answer'])\nfound = []\n"
        "for o in gc.get_objects():\n    try:\n        if key in repr(o) and o is not globals():\n"
        "            found.append(type(o).__name__)\n    except Exception:\n        pass\n"
        "print(sorted(os.listdir('.')), found)\nprint(key)\n"
    )
    result = _run(sandbox, code, secret)
    assert not result.passed and result.details[0]["got"].startswith("['code_runner.py'] []"), result.details


# Reads every anonymous mapping of its own process (freed heap included) for the expected output of its test. It also
# counts the copies of the next test's input it finds (the job's inputs are inherited by every test process), so that
# a scan that reads nothing cannot pass for one that finds nothing.
HEAP_SCAN = r"""
import ctypes, re, sys
k, n = map(int, input().split()[:2])
answer = re.compile(rb"answer-%d-[0-9a-f]{32}" % k)
probe = re.compile(rb"probe-%d-[0-9a-f]{32}" % ((k + 1) % n))
found, probes = None, 0
for line in open("/proc/self/maps").read().splitlines():
    fields = line.split()
    start, end = (int(x, 16) for x in fields[0].split("-"))
    if fields[1][0] != "r" or fields[5:] not in ([], ["[heap]"]) or end - start > 1 << 28:
        continue
    memory = ctypes.string_at(start, end - start)
    found = found or answer.search(memory)
    probes += len(probe.findall(memory))
print(found.group().decode() if found else "nothing found")
print("probes", probes, file=sys.stderr)
"""


def test_expected_outputs_are_not_in_the_candidates_memory(sandbox):
    """The issue-15 attack: a program that knows nothing scans its own heap (/proc/self/maps + ctypes.string_at) for
    the expected outputs. When the runner read the whole job and then forked the tests, 4 of these 16 tests (33 of
    64) passed: freed memory is not wiped."""
    n = 16
    hidden = [(f"probe-{k}-{secrets.token_hex(16)}", f"answer-{k}-{secrets.token_hex(16)}") for k in range(n)]
    cases = [{"input": f"{k} {n} {probe}\n", "output": f"{answer}\n"} for k, (probe, answer) in enumerate(hidden)]
    result = _run(sandbox, HEAP_SCAN, {"format": "stdio", "cases": cases}, stop_at_first_failure=False)
    assert [d["status"] for d in result.details] == ["wrong_answer"] * n, result.details
    assert all(d["got"] == "nothing found\n" for d in result.details), [d["got"] for d in result.details]
    assert all(int(d["stderr"].split()[-1]) > 0 for d in result.details), "the scan did not reach the inherited heap"
    assert result.passed_tests == 0


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])
def test_killing_or_stopping_the_runner_fails_promptly(sandbox, sig):
    """The process a test is forked from (the runner's worker) is the solution's parent, which it may signal: the
    run must end as a failure, not pass, hang until the sandbox's clock or crash the judge."""
    start = time.monotonic()
    code = f"import os, signal\nos.kill(os.getppid(), signal.{sig})\n" + ADD_PROGRAM
    result = _run(sandbox, code, ADD, per_test_timeout_s=1.0, stop_at_first_failure=False)
    assert [d["status"] for d in result.details] == ["harness_error"] and result.passed_tests == 0, result.details
    assert time.monotonic() - start < 10  # 1 s test limit + 2 s judge's grace; the sandbox's own clock: 30 + 5 s


def test_each_test_runs_in_a_fresh_process(sandbox):
    code = "import builtins\nbuiltins.runs = getattr(builtins, 'runs', 0) + 1\nprint(builtins.runs)\n"
    cases = [{"input": "", "output": "1\n"}] * 3
    assert _run(sandbox, code, {"format": "stdio", "cases": cases}).passed


def test_humaneval_check_uses_pristine_builtins(sandbox, humaneval):
    code = "import builtins\nbuiltins.abs = lambda x: 0\ndef truncate_number(number):\n    return 0.0\n"
    assert not _run(sandbox, code, humaneval["HumanEval/2"]["tests"]).passed


# ----------------------------------------------------------------------------------------------- extract / reward


@pytest.mark.parametrize(
    "response, expected",
    [
        ("```python\nx = 1\n```", "x = 1\n"),
        ("```py\na\n```\ntext\n```python\nb\n```\n```\nc\n```", "b\n"),  # the last python block wins
        ("```\nplain\n```", "plain\n"),  # no python block: the last block of any tag
        ("```Python3\nz = 2\n```", "z = 2\n"),
        ("no code at all", None),
        ("```python\nunterminated = True\n", None),
    ],
)
def test_extract_code(response, expected):
    assert extract_code(response) == expected


def test_code_reward_info_and_feedback(sandbox):  # code_reward uses the shared default sandbox
    task = {"id": "t", "tests": ADD}
    right = code_reward(task, f"```python\n{ADD_PROGRAM}```")
    assert (right.reward, right.correct) == (1.0, True)
    assert (
        right.info["passed_tests"] == right.info["total_tests"] == 2 and right.info["feedback"] == "All 2 tests passed."
    )
    wrong = code_reward(task, "```python\nprint(3)\n```")
    assert (wrong.reward, wrong.correct, wrong.info["passed_tests"]) == (0.0, False, 1)
    assert wrong.info["first_failure"] == "test 2: wrong answer" and "Input:\n10 -4" in wrong.info["feedback"]
    none = code_reward(task, "I would add the numbers.")
    assert none.reward == 0.0 and none.info["first_failure"] == "no code block" and "```python" in none.info["feedback"]


def test_partial_credit_runs_every_test(sandbox):
    task = {"id": "t", "tests": {**ADD, "cases": ADD["cases"] + [{"input": "5 5\n", "output": "10\n"}]}}
    partial = code_reward(task, "```python\nprint(3)\n```", partial_credit=True)
    assert partial.reward == pytest.approx(1 / 3) and partial.correct is False
    assert code_reward(task, "```python\nprint(3)\n```").reward == 0.0


# --------------------------------------------------------------------------------------------------------- data


def test_normalise_tests_shorthands_and_errors():
    assert normalise_tests([{"input": "1", "output": "2"}])["format"] == "stdio"
    assert normalise_tests({"inputs": ["1"], "outputs": ["2"]})["cases"] == [{"input": "1", "output": "2"}]
    assert normalise_tests(json.dumps(DOUBLE))["fn_name"] == "double"
    for bad in (
        {"format": "stdio", "cases": []},
        {"format": "call", "fn_name": "no name", "cases": [{"args": []}]},
        {"format": "stdio", "cases": [{"input": 1, "output": "2"}]},
        {"format": "humaneval", "test": "x"},
        {"inputs": ["1"], "outputs": []},
        {"format": "sql"},
    ):
        with pytest.raises(MalformedTestsError):
            normalise_tests(bad)


def test_load_code_rows_apps_and_livecodebench():
    apps = [
        {"problem_id": 7, "question": "Add.", "input_output": json.dumps({"inputs": [["1 2"]], "outputs": ["3"]})},
        {
            "problem_id": 8,
            "question": "Double.",
            "starter_code": "def double(x):",
            "input_output": json.dumps({"fn_name": "double", "inputs": [[2]], "outputs": [[4]]}),
        },
    ]
    stdio, call = load_code_rows(apps)
    assert stdio["tests"]["cases"] == [{"input": "1 2\n", "output": "3"}] and stdio["id"] == "7"
    assert call["tests"]["format"] == "call" and call["tests"]["unwrap_single"] and "def double" in code_prompt(call)
    private = base64.b64encode(
        zlib.compress(
            pickle.dumps(json.dumps([{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}]))
        )
    ).decode()
    lcb = {
        "question_id": "abc",
        "question_content": "Append.",
        "metadata": json.dumps({"func_name": "append"}),
        "public_test_cases": json.dumps([{"input": "[]\n1", "output": "[1]", "testtype": "functional"}]),
        "private_test_cases": private,
    }
    (row,) = load_code_rows([lcb])
    assert row["tests"]["cases"] == [{"args": [[], 1], "output": [1]}, {"args": [[1, 2], 3], "output": [1, 2, 3]}]


def test_load_code_rows_refuses_malformed_rows():
    with pytest.raises(MalformedCodeRowError, match="row 1"):
        load_code_rows([{"question": "ok", "tests": ADD}, {"question": "no tests"}])
    mixed = {
        "question": "q",
        "public_test_cases": json.dumps(
            [
                {"input": "1", "output": "1", "testtype": "stdin"},
                {"input": "1", "output": "1", "testtype": "functional"},
            ]
        ),
    }
    with pytest.raises(MalformedCodeRowError, match="all be 'stdin' or all 'functional'"):
        load_code_rows([mixed])
    evil = base64.b64encode(zlib.compress(pickle.dumps(time.sleep))).decode()
    with pytest.raises(MalformedCodeRowError, match="refusing to load"):
        load_code_rows([{"question": "q", "private_test_cases": evil}])


def test_humaneval_rows_and_prompt(humaneval):
    row = humaneval["HumanEval/0"]
    assert row["tests"]["format"] == "humaneval" and row["tests"]["entry_point"] == "has_close_elements"
    prompt = code_prompt(row)
    assert "def has_close_elements" in prompt and "```python" in prompt
    assert len(make_humaneval_tasks(164, seed=3)) == 164 and make_humaneval_tasks(5, seed=1) != make_humaneval_tasks(5)


def test_generated_tasks_are_deterministic_and_their_solutions_pass(sandbox):
    tasks = make_code_tasks(26, seed=0)
    assert tasks == make_code_tasks(26, seed=0) != make_code_tasks(26, seed=1)
    assert len({t["fn_name"] for t in tasks}) >= 8 and all(len(code_prompt(t)) < 300 for t in tasks)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda t: _run(sandbox, t["solution"], t["tests"]), tasks))
    assert [t["id"] for t, r in zip(tasks, results, strict=True) if not r.passed] == []


def test_families_pick_the_templates_and_unknown_ones_are_named():
    from rllm.tasks.code import CODE_FAMILIES

    tasks = make_code_tasks(40, seed=2, families=["caesar", "run_lengths"])
    assert {t["fn_name"] for t in tasks} == {"caesar", "run_lengths"}
    assert make_code_tasks(12, seed=2, families=list(CODE_FAMILIES)) == make_code_tasks(12, seed=2)
    with pytest.raises(ValueError, match=r"unknown code families \['ceasar'\]; data.task_args.families takes"):
        make_code_tasks(1, families=["ceasar"])

"""rLLM v0.2's reward API at rLLM's paths: DeepScaleR's math reward, DeepCoder's code reward on one row of each
test format (a right and a wrong program each, graded in rllm's sandbox), the search and F1 rewards, and the names
`rllm.rewards` serves. The rows are written here in rLLM's data formats."""

from __future__ import annotations

import json

import pytest

from rllm.types import Action

# ------------------------------------------------------------------------------------------------ package names


def test_rllm_rewards_serves_rllms_names_and_keeps_its_own_reward_output():
    import rllm.rewards as rewards
    from rllm.rewards import RewardConfig, RewardFunction, RewardInput, RewardOutput, RewardType, zero_reward
    from rllm.rewards.base import RewardOutput as NativeRewardOutput
    from rllm.rewards.reward_fn import code_reward_fn, f1_reward_fn, math_reward_fn, search_reward_fn

    assert RewardOutput is NativeRewardOutput and rewards.RewardOutput is NativeRewardOutput
    assert RewardOutput(reward=1.0, metadata={"k": 1}, is_correct=True).metadata == {"k": 1}
    assert RewardConfig().correct_reward == 1.0 and RewardConfig().toolcall_bonus == 0.5
    assert RewardType.CODE.value == "CODE"
    assert RewardInput(task_info={"q": 1}, action="a").action == "a"
    with pytest.raises(TypeError):
        RewardInput({"q": 1}, "a")  # keyword-only, as in rLLM
    for fn in (zero_reward, math_reward_fn, code_reward_fn, search_reward_fn, f1_reward_fn):
        assert isinstance(fn, RewardFunction)
    assert zero_reward({}, "anything") == RewardOutput(0.0, metadata={})


# -------------------------------------------------------------------------------------------- DeepScaleR (math)


def _deepscaler_row(answer):
    return {"problem": "What is 6 times 7?", "answer": "42", "ground_truth": answer, "data_source": "deepscaler"}


def test_deepscaler_math_reward_pays_by_rllms_config():
    from rllm.rewards import RewardConfig
    from rllm.rewards.math_reward import RewardMathFn

    reward = RewardMathFn(RewardConfig(correct_reward=2.0, incorrect_reward=-1.0, format_error_reward=-0.5))
    right = reward(_deepscaler_row("42"), "<think>6*7</think>So it is \\boxed{42}.")
    assert (right.reward, right.is_correct, right.metadata["extracted"]) == (2.0, True, "42")
    wrong = reward(_deepscaler_row(["\\boxed{42}", "forty-two"]), "<think>hm</think>\\boxed{41}")
    assert (wrong.reward, wrong.is_correct) == (-1.0, False)
    assert reward(_deepscaler_row("42"), "<think>6*7</think> it is 42").reward == -0.5  # no box: format error
    assert reward(_deepscaler_row("42"), "").reward == -0.5
    # only the text after </think> is graded; with apply_format_reward a reply without </think> is a format error
    assert not reward(_deepscaler_row("42"), "<think>\\boxed{42}</think> \\boxed{7}").is_correct
    strict = RewardMathFn(RewardConfig(apply_format_reward=True, format_error_reward=-0.5))
    assert strict(_deepscaler_row("42"), "\\boxed{42}").reward == -0.5
    assert RewardMathFn(RewardConfig())(_deepscaler_row(None), "\\boxed{42}").is_correct is False


def test_math_reward_fn_grades_mathematics_not_strings_and_pays_the_tool_bonus():
    from rllm.rewards.reward_fn import math_reward_fn

    row = {"ground_truth": "\\frac{1}{2}", "has_toolcall": True}
    assert math_reward_fn(row, Action("<think>..</think> \\boxed{0.5}")).reward == 1.5
    assert math_reward_fn(task_info={"ground_truth": 7}, action="<|begin_of_box|>7<|end_of_box|>").is_correct


# -------------------------------------------------------------------------------------------- DeepCoder (code)

STDIO_RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
STDIO_WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
CALL_RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
CALL_WRONG = "```python\ndef add(a, b):\n    return a * b\n```"
SOLUTION_RIGHT = "```python\nclass Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n```"
SOLUTION_WRONG = "```python\nclass Solution:\n    def add(self, a: int, b: int) -> int:\n        return a - b\n```"
STDIO_CASES = [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4", "output": "6"}]
LEETCODE_CHECK = (
    "def check(candidate):\n    assert candidate(a=2, b=3) == 5\n    assert candidate(1, 1) == 2\n\n\n"
    "check(Solution().add)\n"
)
EVALPLUS_CHECK = """
import numpy as np

def assertion(out, exp, atol):
    if atol == 0 and isinstance(exp, float):
        atol = 1e-6
    if out != exp and atol != 0:
        np.testing.assert_allclose(out, exp, atol=atol)
    else:
        assert out == exp

def check(candidate):
    inputs = [[2, 3], [0.1, 0.2]]
    results = [5, 0.3]
    for inp, exp in zip(inputs, results):
        assertion(candidate(*inp), exp, 0)

check(add)
"""

KODCODE_TESTS = """
import pytest
from solution import add

def test_add():
    assert add(2, 3) == 5

def test_add_rejects_text():
    with pytest.raises(TypeError):
        add(1, "x")
"""

CODE_ROWS = {  # (data_source, ground_truth, right reply, wrong reply)
    "taco stdin/stdout": (
        "taco",
        {"inputs": ["2 3\n", "10 -4\n"], "outputs": ["5\n", "6\n"]},
        STDIO_RIGHT,
        STDIO_WRONG,
    ),
    "taco fn_name": (
        "taco",
        {"fn_name": "add", "inputs": [[2, 3], [1, 1]], "outputs": [[5], [2]]},
        CALL_RIGHT,
        CALL_WRONG,
    ),
    "code_contests": ("code_contests", json.dumps({"inputs": ["2 3"], "outputs": ["5"]}), STDIO_RIGHT, STDIO_WRONG),
    "livecodebench stdin": (
        "livecodebench",
        [{**c, "testtype": "stdin"} for c in STDIO_CASES],
        STDIO_RIGHT,
        STDIO_WRONG,
    ),
    "livecodebench functional": (
        "livecodebench",
        [{"input": "2\n3", "output": "5", "testtype": "functional", "metadata": {"func_name": "add"}}],
        SOLUTION_RIGHT,
        SOLUTION_WRONG,
    ),
    "codeforces": ("codeforces", STDIO_CASES, STDIO_RIGHT, STDIO_WRONG),
    "primeintellect fn_name": (
        "primeintellect",
        [{"input": [2, 3], "output": 5, "fn_name": "add"}],
        CALL_RIGHT,
        CALL_WRONG,
    ),
    "leetcode": ("leetcode", {"functional": LEETCODE_CHECK}, SOLUTION_RIGHT, SOLUTION_WRONG),
    "humanevalplus": ("humanevalplus", EVALPLUS_CHECK, CALL_RIGHT, CALL_WRONG),
    "kodcode (pytest)": ("kodcode", KODCODE_TESTS, CALL_RIGHT, CALL_WRONG),
}


@pytest.mark.parametrize("row_format", sorted(CODE_ROWS))
def test_deepcoder_code_reward_grades_each_row_format_in_the_sandbox(row_format):
    from rllm.rewards import RewardConfig
    from rllm.rewards.code_reward import RewardCodeFn

    data_source, tests, right, wrong = CODE_ROWS[row_format]
    row = {"problem": "add two numbers", "data_source": data_source, "ground_truth": tests}
    reward = RewardCodeFn(RewardConfig(incorrect_reward=-1.0))
    passed = reward(row, right)
    assert (passed.reward, passed.is_correct) == (1.0, True), passed.metadata
    assert passed.metadata["passed_tests"] == passed.metadata["total_tests"] >= 1
    failed = reward(row, wrong)
    assert (failed.reward, failed.is_correct) == (-1.0, False)
    assert failed.metadata["first_failure"] and not failed.metadata["all_passed"]


def test_code_reward_fn_on_a_deepcoder_prepared_row_and_its_format_errors():
    from rllm.rewards.code_reward import UnsupportedCodeRowError
    from rllm.rewards.reward_fn import code_reward_fn

    # what examples/deepcoder/prepare_deepcoder_data.py stores: the tests as a JSON string, data_source livecodebench
    cases = [{**c, "testtype": "stdin_stdout", "metadata": {"func_name": None}} for c in STDIO_CASES]
    row = {"question": "...", "ground_truth": json.dumps(cases), "data_source": "livecodebench"}
    assert code_reward_fn(row, Action(STDIO_RIGHT)).is_correct
    future = STDIO_RIGHT.replace("```python\n", "```python\nfrom __future__ import annotations\n")
    assert code_reward_fn(row, future).is_correct  # the standard-library prelude goes below a __future__ import
    unfenced = code_reward_fn(row, "a, b = map(int, input().split())\nprint(a + b)")
    assert (unfenced.reward, unfenced.metadata) == (0.0, {"error": "No code found in model response"})
    assert code_reward_fn({**row, "ground_truth": None}, STDIO_RIGHT).metadata["error"] == "No tests found in task_info"
    exits_early = "```python\nimport os\nos._exit(0)\n```"  # pytest's exit status would say "passed"
    assert not code_reward_fn({"data_source": "kodcode", "ground_truth": KODCODE_TESTS}, exits_early).is_correct
    with pytest.raises(UnsupportedCodeRowError, match="data_source 'swebench'") as raised:
        code_reward_fn({"data_source": "swebench", "ground_truth": {"instance_id": "x"}}, CALL_RIGHT)
    assert isinstance(raised.value, NotImplementedError)  # what rLLM raises for a source it does not know


def test_fetch_live_code_bench_system_prompt_wraps_the_problem_for_the_code_reward():
    from rllm.data.utils import fetch_live_code_bench_system_prompt

    with_starter = fetch_live_code_bench_system_prompt("Add a and b.", "class Solution:\n    def add(self, a, b):")
    assert (
        "Add a and b." in with_starter and "```python\nclass Solution:\n    def add(self, a, b):\n```" in with_starter
    )
    without = fetch_live_code_bench_system_prompt("Add a and b.")
    assert "standard input" in without and "```python" in without


# --------------------------------------------------------------------------------------------------- search / F1


def test_search_reward_exact_match_f1_credit_and_missing_ground_truth():
    from rllm.rewards import RewardConfig, RewardInput
    from rllm.rewards.search_reward import RewardSearchFn

    reward = RewardSearchFn(RewardConfig())
    exact = reward(
        RewardInput(task_info={"ground_truth": ["Paris", "City of Paris"]}, action="<think>France</think>**Paris.**")
    )
    assert (exact.reward, exact.is_correct, exact.metadata["extracted_answer"]) == (1.0, True, "Paris.")
    partial = reward(RewardInput(task_info={"answer": "Barack Obama"}, action="The answer is President Barack Obama."))
    assert partial.is_correct and partial.reward == pytest.approx(0.8) and partial.metadata["exact_match"] is False
    wrong = reward(RewardInput(task_info={"ground_truth": "no"}, action="\\boxed{no way}"))
    assert (wrong.reward, wrong.is_correct) == (0.0, False)  # yes/no must match exactly
    assert reward(RewardInput(task_info={}, action="x")).metadata == {"error": "No ground truth provided"}


def test_search_and_f1_reward_fns():
    from rllm.rewards.reward_fn import f1_reward_fn, search_reward_fn

    assert search_reward_fn({"ground_truth": "1969"}, Action("It landed in \\boxed{1969}.")).is_correct
    assert f1_reward_fn({"ground_truth": "the cat sat"}, "A cat sat down").reward == pytest.approx(0.8)
    assert f1_reward_fn({"ground_truth": None}, "anything").reward == 0.0

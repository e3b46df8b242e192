import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rllm.rewards.base import RewardOutput
from rllm.rewards.math import (
    MAX_VERIFY_CHARS,
    extract_boxed,
    extract_final_answer,
    math_equal,
    math_reward,
    normalize_answer,
    verify_stats,
)

# math-verify comes with the `tasks` extra that `make test` installs: a missing one fails loudly.
needs_math_verify = pytest.mark.usefixtures()

# ------------------------------------------------------------------------------------------------------ extraction


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so the answer is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{\sqrt{\frac{1}{4}}}", r"\sqrt{\frac{1}{4}}"),
        (r"first \boxed{1}, on reflection \boxed{2}", "2"),  # the last one wins
        (r"\fbox{7}", "7"),
        (r"\boxed { 3 }", "3"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces are a latex set, not grouping
        (r"\boxed{\boxed{1}}", r"\boxed{1}"),  # the outermost of nested boxes
        (
            r"\boxed{1} then, cut off: \boxed{\frac{1}{2}",
            None,
        ),  # an unclosed last box is no answer, not the earlier one
        (r"\boxed{", None),
        ("no box at all", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_extract_boxed_is_linear_on_hostile_input():
    start = time.perf_counter()
    assert extract_boxed("\\boxed{" * 100_000) is None
    assert extract_boxed("{" * 100_000 + "\\boxed{1}" + "}" * 100_000) == "1"
    assert extract_boxed(None) is None
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"The answer is \boxed{5}. Final answer: 6", "5"),  # a box beats every fallback
        ("So the answer is 42.", "42"),
        ("**Final Answer:** $\\frac{3}{4}$", r"\frac{3}{4}"),
        ("The answer is $3.5$ apples. Done.", "3.5"),
        ("Final answer:\n\n17", "17"),
        ("Janet earns 9 * 2 = 18.\n#### 18", "18"),  # GSM8K
        ("<answer> 12 </answer>", "12"),
        ("The answer is 5. No wait, the final answer: 6", "6"),  # the last occurrence, even on one line
        ("#### 4\nThe answer is 5", "5"),
        (r"\boxed{}", None),
        ("I do not know.", None),
    ],
)
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("$1,000$", "1000"),
        ("1{,}000", "1000"),
        ("0.50", "0.5"),
        ("12.0", "12"),
        (".5", "0.5"),
        (r"\dfrac{1}{2}", "1/2"),
        (r"\frac12", "1/2"),
        (r"-\tfrac{7}{3}", "-7/3"),
        (r"2\frac{1}{2}", r"2\frac{1}{2}"),  # a mixed number is 2.5, never "21/2"
        (r"10\text{ cm}", "10"),
        (r"\text{A}", "A"),
        (r"90^\circ", "90"),
        (r"50\%", "50"),
        (r"\$ 5", "5"),
        ("x = 5", "5"),
        (r"\left( 1, 2 \right)", "(1,2)"),  # a pair keeps its comma
        (r"\sqrt2", r"\sqrt{2}"),
        ("3.", "3"),
        ("\u22124", "-4"),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


# ----------------------------------------------------------------------------------------------------- equivalence


@needs_math_verify
@pytest.mark.parametrize(
    "prediction, reference, expected",
    [
        (r"\frac{1}{2}", "0.5", True),
        ("0.5", r"\frac{1}{2}", True),
        (r"\frac{2}{4}", r"\frac{1}{2}", True),
        (r"2\sqrt{2}", r"\sqrt{8}", True),
        ("x=5", "5", True),  # documented: naming the variable is fine
        ("3", "4", False),
        ("1,000", "1000", True),
        (r"50\%", "50", True),  # documented (math-verify): a percent reads as its number ...
        (r"50\%", "0.5", True),  # ... or as its fraction
        ("-5", "5", False),
        (r"[1,2)", r"[1, 2)", True),  # intervals compare as sets
        (r"[1,2]", r"[1,2)", False),
        (r"\{2,1\}", r"\{1,2\}", True),
        ("x^2+2x+1", "(x+1)^2", True),  # symbolic
        (r"2\frac{1}{2}", "21/2", False),
        (r"2.3333333", r"\frac{7}{3}", True),  # decimals agree to the printed precision ...
        ("2.333", r"\frac{7}{3}", False),  # ... and no further
        ("hello", "5", False),
        ("", "5", False),
        ("5", "", False),
    ],
)
def test_math_equal(prediction, reference, expected):
    assert math_equal(prediction, reference) is expected


@needs_math_verify
def test_garbage_and_huge_inputs_are_false_quickly():
    start = time.perf_counter()
    assert not math_equal("1" * 100_000, "5")
    assert not math_equal("\\frac{" * 50_000 + "1" + "}" * 50_000, "5")
    assert not math_equal("{" * 60 + "1" + "}" * 60 + "}}}", "5")  # unbalanced, but short enough for sympy
    assert not math_equal("\x00\udcff\\\\$$$", "5")
    assert math_equal(5, "5") and not math_equal(None, "5")  # non-strings do not raise either
    assert time.perf_counter() - start < 5.0
    assert MAX_VERIFY_CHARS < 100_000


@needs_math_verify
def test_a_hanging_check_times_out_in_a_worker_thread():
    # 9^{9^{9^9}} makes sympy build a tower of integers: measured over 20 s without a deadline, and math-verify's
    # own SIGALRM deadline is refused outside the main thread, which is where reward functions run.
    before = verify_stats()["timeouts"]
    with ThreadPoolExecutor(1) as pool:
        math_equal("6", "3+3")  # a worker process is up, so the clock below measures the check alone
        start = time.perf_counter()
        result = pool.submit(math_reward, {"answer": "5"}, r"\boxed{9^{9^{9^9}}}", timeout_s=1.5).result()
        elapsed = time.perf_counter() - start
    assert 1.4 < elapsed < 2.5  # it really ran until the deadline, and no longer
    assert result == RewardOutput(0.0, is_correct=False, info={"extracted": "9^{9^{9^9}}", "reason": "timeout"})
    assert verify_stats()["timeouts"] == before + 1
    assert math_equal(r"\sqrt{9}", "3")  # a fresh worker replaces the killed one


@needs_math_verify
def test_math_verify_alone_refuses_worker_threads():
    """Why the deadline is ours: math-verify's default timeout uses signals, which a worker thread cannot set."""
    from math_verify import parse

    errors = []

    def call():
        try:
            parse("$1$")
        except ValueError as error:
            errors.append(str(error))

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert errors and "threaded environment" in errors[0]


@needs_math_verify
def test_math_equal_from_many_threads_at_once():
    pairs = [(f"\\frac{{{k}}}{{{2 * k}}}", "0.5") for k in range(1, 9)] + [(f"{k}/4", str(k / 4 + 1)) for k in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda pair: math_equal(*pair), pairs))
    assert results == [True] * 8 + [False] * 8


# ---------------------------------------------------------------------------------------------------------- reward


@needs_math_verify
def test_math_reward_scores_and_explains():
    task = {"question": "Half of one?", "answer": r"\frac{1}{2}"}
    assert math_reward(task, r"Half is \boxed{0.5}.") == RewardOutput(
        1.0, is_correct=True, info={"extracted": "0.5", "reason": "correct"}
    )
    assert math_reward(task, r"\boxed{0.4}") == RewardOutput(
        0.0, is_correct=False, info={"extracted": "0.4", "reason": "wrong"}
    )
    assert math_reward(task, "I give up.") == RewardOutput(
        0.0, is_correct=False, info={"extracted": None, "reason": "no_answer"}
    )
    assert math_reward(task, "The answer is 1/2.").reward == 1.0  # an unboxed right answer still counts


@needs_math_verify
def test_format_reward_is_opt_in_and_only_for_a_boxed_wrong_answer():
    task = {"answer": "7"}
    assert math_reward(task, r"\boxed{8}", format_reward=0.1) == RewardOutput(
        0.1, is_correct=False, info={"extracted": "8", "reason": "wrong"}
    )
    assert math_reward(task, "The answer is 8", format_reward=0.1).reward == 0.0  # not the requested format
    assert math_reward(task, "no answer", format_reward=0.1).reward == 0.0
    assert math_reward(task, r"\boxed{7}", format_reward=0.1).reward == 1.0


def test_math_reward_with_another_answer_key_and_numeric_references():
    assert math_reward({"target": 12}, r"\boxed{12}", answer_key="target").is_correct
    assert math_reward({"answer": 0.5}, r"\boxed{0.50}").is_correct


def test_a_task_without_its_answer_is_a_dataset_bug_not_a_zero():
    with pytest.raises(ValueError, match=r"no 'answer'.*keys: \['question'\]"):
        math_reward({"question": "1+1?"}, r"\boxed{2}")
    with pytest.raises(ValueError, match="no 'solution'"):
        math_reward({"answer": "2"}, r"\boxed{2}", answer_key="solution")


def test_math_reward_never_raises_on_odd_replies():
    task = {"answer": "3"}
    for response in [None, "", "\\boxed{" * 10_000, "the answer " * 10_000, "\\boxed{3" + "}" * 5]:
        assert math_reward(task, response).reward in (0.0, 1.0)


def test_without_math_verify_normalised_strings_decide(monkeypatch):
    import rllm.rewards.math as math_module

    monkeypatch.setattr(math_module, "_math_verify_installed", lambda: False)
    monkeypatch.setattr(math_module, "_POOL", math_module._WorkerPool(1))  # no worker started before the patch
    before = verify_stats()["errors"]
    assert math_equal(r"\dfrac{3}{8}", "3/8")  # equal as normalised strings
    assert not math_equal(r"\frac{3}{8}", "0.375")  # equal, but only sympy can tell
    assert verify_stats()["errors"] == before + 1


def test_a_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s must be a positive"):
        math_reward({"answer": "1"}, r"\boxed{1}", timeout_s=0)

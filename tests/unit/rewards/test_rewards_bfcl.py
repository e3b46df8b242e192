import json

import pytest

from rllm.rewards.base import RewardError
from rllm.rewards.bfcl import bfcl_reward, parse_call

# BFCL simple_0, as the possible-answer file and the function file give it
FUNCTIONS = [
    {
        "name": "calculate_triangle_area",
        "description": "Calculate the area of a triangle given its base and height.",
        "parameters": {
            "type": "dict",
            "properties": {
                "base": {"type": "integer", "description": "The base of the triangle."},
                "height": {"type": "integer", "description": "The height of the triangle."},
                "unit": {"type": "string", "description": "The unit of measure (defaults to 'units')."},
            },
            "required": ["base", "height"],
        },
    }
]
TRIANGLE = {
    "id": "simple_0",
    "functions": FUNCTIONS,
    "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}],
}
OPENAI_TOOL_CALL = json.dumps(
    {"type": "function", "function": {"name": "calculate_triangle_area", "arguments": '{"base": 10, "height": 5}'}}
)


@pytest.mark.parametrize(
    "reply",
    [
        "calculate_triangle_area(base=10, height=5)",
        "[calculate_triangle_area(base=10, height=5)]",  # BFCL's prompt format
        "calculate_triangle_area(base=10, height=5, unit='units')",
        "calculate_triangle_area(height=5, base=10, unit='Units')",  # order and case do not matter
        "```python\ncalculate_triangle_area(base=10, height=5)\n```",
        "Sure! I will call calculate_triangle_area(base=10, height=5). It returns the area.",
        '{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}',
        '[{"name": "calculate_triangle_area", "parameters": {"base": 10, "height": 5}}]',
        OPENAI_TOOL_CALL,  # arguments as a JSON string
        '<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}\n</tool_call>',
        'The call is {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}} as asked.',
    ],
)
def test_a_right_call_in_any_usual_form_scores_one(reply):
    out = bfcl_reward(TRIANGLE, reply)
    assert (out.reward, out.is_correct, out.info["reason"]) == (1.0, True, "correct")


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("calculate_area(base=10, height=5)", "wrong function name: called calculate_area"),
        ("calculate_triangle_area(base=10)", "missing required parameter height"),
        ("calculate_triangle_area(base=10, height=5, color='red')", "unexpected parameter color"),
        ("calculate_triangle_area(base=10, height=6)", "value of height not allowed"),
        ("calculate_triangle_area(base=10, height=5, unit='cm')", "value of unit not allowed"),
        ("calculate_triangle_area(base=10.0, height=5)", "value of base has type float, expected integer"),
        ("calculate_triangle_area(base='10', height=5)", "value of base has type str, expected integer"),
        ("calculate_triangle_area(base=True, height=5)", "value of base has type bool"),
        ("calculate_triangle_area(10, 5)", "positional"),
        ("[calculate_triangle_area(base=10, height=5), calculate_triangle_area(base=1, height=1)]", "2 calls"),
        ("The area is 25.", "no function call found"),
    ],
)
def test_a_wrong_call_scores_zero_and_says_why(reply, reason):
    out = bfcl_reward(TRIANGLE, reply)
    assert (out.reward, out.is_correct) == (0.0, False)
    assert out.info["reason"].startswith(reason) or reason in out.info["reason"]


def test_an_int_is_accepted_for_a_float_but_not_the_reverse():
    schema = [{"name": "f", "parameters": {"properties": {"p": {"type": "float"}, "n": {"type": "integer"}}}}]
    task = {"functions": schema, "ground_truth": [{"f": {"p": [1.0], "n": [3]}}]}
    assert bfcl_reward(task, "f(p=1, n=3)").reward == 1.0
    assert bfcl_reward(task, "f(p=1.0, n=3)").reward == 1.0
    assert bfcl_reward(task, "f(p=1/1, n=3)").reward == 1.0  # simple arithmetic is evaluated, as BFCL does
    assert "type float" in bfcl_reward(task, "f(p=1.0, n=3.0)").info["reason"]


def test_a_missing_parameter_the_answer_needs_fails_even_when_the_schema_makes_it_optional():
    task = {**TRIANGLE, "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["cm"]}}]}
    assert bfcl_reward(task, "calculate_triangle_area(base=10, height=5)").info["reason"] == "missing parameter unit"


def test_strings_compare_as_bfcl_standardizes_them():
    task = {"ground_truth": [{"book": {"date": ["April 1, 2024"], "city": ["New York", "NYC"]}}]}
    assert bfcl_reward(task, "book(date='april 1 2024', city='NYC')").reward == 1.0
    assert bfcl_reward(task, 'book(date="April-1-2024", city="new york")').reward == 1.0
    assert bfcl_reward(task, "book(date='April 2, 2024', city='NYC')").reward == 0.0


def test_lists_and_dicts_compare_by_value():
    task = {
        "ground_truth": [
            {
                "plan": {
                    "stops": [["Paris", "Rome"], ["paris", "rome", "berlin"]],
                    "weights": [[0.5, 1.0]],
                    "options": [{"mode": ["train", "rail"], "pets": [""]}],
                }
            }
        ]
    }
    good = "plan(stops=['Paris', 'Rome'], weights=[0.5, 1], options={'mode': 'Rail'})"
    assert bfcl_reward(task, good).reward == 1.0
    assert bfcl_reward(task, good.replace("['Paris', 'Rome']", "['Rome', 'Paris']")).reward == 0.0  # order counts
    assert bfcl_reward(task, good.replace("'Rail'}", "'Rail', 'pets': 'no'}")).reward == 0.0  # a value not allowed
    assert bfcl_reward(task, good.replace("'mode': 'Rail'", "'speed': 3")).reward == 0.0  # an unknown key


def test_a_dotted_name_also_matches_with_underscores():
    task = {"ground_truth": [{"math.hypot": {"x": [4], "y": [5], "z": ["", 0]}}]}
    assert bfcl_reward(task, "math.hypot(x=4, y=5)").reward == 1.0
    assert bfcl_reward(task, '{"name": "math_hypot", "arguments": {"x": 4, "y": 5, "z": 0}}').reward == 1.0


def test_exec_ground_truth_is_a_call_whose_every_argument_is_required():
    task = {"id": "exec_simple_3", "ground_truth": ["calc_binomial_probability(n=20, k=5, p=0.6)"]}
    assert bfcl_reward(task, "calc_binomial_probability(n=20, k=5, p=0.6)").reward == 1.0
    assert bfcl_reward(task, "calc_binomial_probability(k=5, n=20, p=0.60)").reward == 1.0
    assert bfcl_reward(task, "calc_binomial_probability(n=20, k=5, p=0.5)").info["reason"].startswith("value of p")
    assert bfcl_reward(task, "calc_binomial_probability(n=20, k=5)").info["reason"] == "missing parameter p"


def test_the_schema_may_arrive_as_json_text_or_be_absent():
    as_text = {**TRIANGLE, "functions": json.dumps(FUNCTIONS)}
    assert "unexpected" in bfcl_reward(as_text, "calculate_triangle_area(base=10, height=5, x=1)").info["reason"]
    without = {"ground_truth": TRIANGLE["ground_truth"]}
    assert bfcl_reward(without, "calculate_triangle_area(base=10, height=5)").reward == 1.0
    assert "type float" in bfcl_reward(without, "calculate_triangle_area(base=10.0, height=5)").info["reason"]


def test_parse_call():
    assert parse_call("f(a=[1, 2], b={'k': -3}, c=None, d=x)") == (
        "f",
        {"a": [1, 2], "b": {"k": -3}, "c": None, "d": "x"},
    )
    assert parse_call("step (1) then g(n=2 ** 3)") == ("g", {"n": 8})
    assert parse_call("f(n=10 ** 10 ** 10)") == ("f", {"n": "10 ** 10 ** 10"})  # never computed
    assert parse_call("f(x=g(1))") == ("f", {"x": "g(1)"})  # a nested call is the outer one's argument
    assert parse_call("no call here") is None


@pytest.mark.parametrize("reply", ["", "   ", None, 12, [{"name": "calculate_triangle_area"}]])
def test_a_reply_that_is_not_text_scores_zero(reply):
    out = bfcl_reward(TRIANGLE, reply)
    assert (out.reward, out.is_correct) == (0.0, False)
    assert "reply" in out.info["reason"]


@pytest.mark.parametrize(
    "truth, message",
    [
        (None, "needs 'ground_truth'"),
        ([], "needs 'ground_truth'"),
        ({"f": {"a": [1]}}, "needs 'ground_truth'"),
        (["f(a=1)", "g(b=2)"], "several calls"),
        (["not a call"], "not a call with named arguments"),
        (["f(1, 2)"], "not a call with named arguments"),
        ([{"f": {"a": 1}}], "must be a list"),
        ([{"f": {"a": [1]}, "g": {}}], "needs 'ground_truth'"),
    ],
)
def test_a_row_without_a_usable_ground_truth_is_refused(truth, message):
    with pytest.raises(RewardError, match=message):
        bfcl_reward({"id": "simple_9", "ground_truth": truth}, "f(a=1)")


def test_functions_that_are_not_json_are_refused():
    with pytest.raises(RewardError, match="'functions' that are not JSON"):
        bfcl_reward({**TRIANGLE, "functions": "[{oops"}, "calculate_triangle_area(base=10, height=5)")


@pytest.mark.parametrize("reply", ["[" * 50000, "f(" * 20000, '{"a":' * 5000, "f(a=" + "[" * 10000 + "]" * 10000 + ")"])
def test_degenerate_replies_score_zero_without_raising(reply):
    out = bfcl_reward(TRIANGLE, reply)
    assert (out.reward, out.is_correct) == (0.0, False)

import json
import re
from fractions import Fraction

import pytest

from rllm.rewards.math import math_reward
from rllm.tasks.math import (
    load_math_rows,
    make_arithmetic_word_tasks,
    make_linear_equation_tasks,
    make_math_tasks,
    math_prompt,
)

# math-verify comes with the `tasks` extra that `make test` installs: a missing one fails loudly.
needs_math_verify = pytest.mark.usefixtures()

ROWS = [
    {"problem": "1 + 1?", "solution": "2", "level": 1},
    {"problem": "Half of 3?", "solution": r"\frac{3}{2}", "level": 2, "id": "given-id"},
]

# --------------------------------------------------------------------------------------------------------- loading


def test_jsonl_with_custom_keys_renames_them_and_keeps_the_rest(tmp_path):
    path = tmp_path / "algebra.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in ROWS) + "\n\n")  # a blank line at the end is fine
    rows = load_math_rows(path, question_key="problem", answer_key="solution")
    assert rows == [
        {"question": "1 + 1?", "answer": "2", "level": 1, "id": "algebra-0"},
        {"question": "Half of 3?", "answer": r"\frac{3}{2}", "level": 2, "id": "given-id"},
    ]
    assert load_math_rows(str(path), question_key="problem", answer_key="solution", limit=1) == rows[:1]


def test_json_list_and_list_of_dicts_load_the_same(tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"question": "2 * 3?", "answer": 6}]))
    assert load_math_rows(path) == [{"question": "2 * 3?", "answer": "6", "id": "set-0"}]  # numbers become text
    assert load_math_rows([{"question": "2 * 3?", "answer": 6}]) == [
        {"question": "2 * 3?", "answer": "6", "id": "math-0"}
    ]
    assert load_math_rows([]) == []
    assert load_math_rows(ROWS, question_key="problem", answer_key="solution", limit=0) == []


def test_gsm8k_answers_are_split_at_the_marker():
    rows = load_math_rows([{"question": "q", "answer": "She has 3 + 4 = 7 left.\n#### 7"}])
    assert rows == [{"question": "q", "answer": "7", "solution": "She has 3 + 4 = 7 left.\n#### 7", "id": "math-0"}]


def test_parquet_and_datasets_sources(tmp_path):
    pytest.importorskip("pyarrow")
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_list(ROWS[:1])
    path = tmp_path / "train.parquet"
    dataset.to_parquet(str(path))
    expected = [{"question": "1 + 1?", "answer": "2", "level": 1}]
    from_file = load_math_rows(path, question_key="problem", answer_key="solution")
    from_dataset = load_math_rows(dataset, question_key="problem", answer_key="solution")
    assert from_file == [{**expected[0], "id": "train-0"}]
    assert from_dataset == [{**expected[0], "id": "math-0"}]


@pytest.mark.parametrize(
    "rows, message",
    [
        (
            [{"question": "ok", "answer": "1"}, {"question": "no answer here"}],
            r"row 1 of list has no 'answer' \(the answer\); its keys are \['question'\]",
        ),
        (
            [{"problem": "p", "answer": "1"}],
            r"row 0 of list has no 'question' \(the question\); its keys are \['answer', 'problem'\]",
        ),
        ([{"question": "q", "answer": "  "}], r"row 0 of list has an empty or non-text 'answer'"),
        ([{"question": "q", "answer": [1, 2]}], r"non-text 'answer' \(\[1, 2\]\)"),
    ],
)
def test_bad_rows_are_refused_by_index_and_keys(rows, message):
    with pytest.raises(ValueError, match=message):
        load_math_rows(rows)


def test_bad_sources_say_what_is_wrong(tmp_path):
    with pytest.raises(TypeError, match="not one row"):
        load_math_rows({"question": "q", "answer": "1"})
    with pytest.raises(TypeError, match="row 0 of list is a str"):
        load_math_rows(["q"])
    with pytest.raises(FileNotFoundError, match="no dataset file"):
        load_math_rows(tmp_path / "missing.jsonl")
    (tmp_path / "a.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match=r"expected a \.jsonl, \.json or \.parquet"):
        load_math_rows(tmp_path / "a.csv")
    (tmp_path / "b.json").write_text('{"question": "q"}')
    with pytest.raises(ValueError, match="must be a list of objects"):
        load_math_rows(tmp_path / "b.json")
    (tmp_path / "c.jsonl").write_text('{"question": "q", "answer": "1"}\n{oops\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        load_math_rows(tmp_path / "c.jsonl")


# ------------------------------------------------------------------------------------------------------ generators

GENERATORS = [make_arithmetic_word_tasks, make_linear_equation_tasks, make_math_tasks]


@pytest.mark.parametrize("make", GENERATORS)
def test_generators_are_deterministic_and_differ_by_seed(make):
    tasks = make(40, seed=1)
    assert tasks == make(40, seed=1) != make(40, seed=2)
    assert len(tasks) == 40 and len({t["id"] for t in tasks}) == 40
    assert all(set(t) == {"id", "question", "answer"} and t["question"] and t["answer"] for t in tasks)
    assert make(0) == []
    with pytest.raises(ValueError, match="n must be 0 or more"):
        make(-1)


def test_word_problems_have_non_negative_integer_answers():
    for task in make_arithmetic_word_tasks(300, seed=3):
        assert re.fullmatch(r"\d+", task["answer"]), task
        assert task["question"].endswith("?")


def test_equation_answers_solve_their_equation():
    """Solve each equation independently of the generator: substitute the answer into both sides."""
    tasks = make_linear_equation_tasks(300, seed=4)
    fractions = 0
    for task in tasks:
        variable, equation = re.fullmatch(r"Solve for (\w): (.*)", task["question"]).groups()
        left, right = equation.split(" = ")
        match = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", task["answer"])
        value = Fraction(int(match[2]), int(match[3])) * (-1 if match[1] else 1) if match else Fraction(task["answer"])
        fractions += value.denominator != 1
        assert _evaluate(left, variable, value) == _evaluate(right, variable, value), task
    assert 0.15 < fractions / len(tasks) < 0.45  # fraction_share=0.3 by default


def _evaluate(side: str, variable: str, value: Fraction) -> Fraction:
    expression = re.sub(rf"(\d)\s*{variable}", rf"\1*{variable}", side)  # 3x -> 3*x
    return eval(expression, {}, {variable: value})  # only the generator's own text, checked just above


def test_math_tasks_kinds():
    assert make_math_tasks(10, seed=5, kind="arithmetic") == make_arithmetic_word_tasks(10, seed=5)
    assert make_math_tasks(10, seed=5, kind="equation") == make_linear_equation_tasks(10, seed=5)
    mixed = make_math_tasks(5, seed=5)
    assert [t["id"] for t in mixed] == [
        "math-arith-5-0",
        "math-eq-5-0",
        "math-arith-5-1",
        "math-eq-5-1",
        "math-arith-5-2",
    ]
    with pytest.raises(ValueError, match="kind must be one of arithmetic, equation, mixed"):
        make_math_tasks(1, kind="geometry")


@needs_math_verify
@pytest.mark.parametrize("make", [make_arithmetic_word_tasks, make_linear_equation_tasks])
def test_every_generated_answer_scores_one(make):
    for task in make(200, seed=11):
        result = math_reward(task, f"Let me think. ... \\boxed{{{task['answer']}}}")
        assert result.reward == 1.0 and result.is_correct, (task, result)


@needs_math_verify
def test_equivalent_spellings_of_fraction_answers_score_one():
    """Unreduced fractions go past the string fallback to sympy: the answer is graded as a number."""
    tasks = [t for t in make_linear_equation_tasks(60, seed=12) if "frac" in t["answer"]][:10]
    assert len(tasks) == 10
    for task in tasks:
        numerator, denominator = map(int, re.findall(r"\d+", task["answer"]))
        sign = "-" if task["answer"].startswith("-") else ""
        reply = f"\\boxed{{{sign}\\dfrac{{{2 * numerator}}}{{{2 * denominator}}}}}"
        assert math_reward(task, reply).is_correct, (task, reply)
        assert not math_reward(task, f"\\boxed{{{sign}\\frac{{{numerator + 1}}}{{{denominator}}}}}").is_correct


def test_math_prompt_asks_for_a_boxed_answer():
    task = make_math_tasks(1, seed=0)[0]
    prompt = math_prompt(task)
    assert "\\boxed{" in prompt and prompt.endswith(task["question"])
    assert len(prompt) < len(task["question"]) + 100  # short: every prompt token is paid for per sample

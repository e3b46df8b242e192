import pytest

from rllm.tasks.countdown import (
    check_expression,
    countdown_prompt,
    countdown_reward,
    extract_answer,
    make_countdown_tasks,
    score_countdown,
)

TASK = {"id": "t", "numbers": [3, 7, 9], "target": 30, "solution": "3 * (7 + 9) - 18"}


def test_tasks_are_deterministic_and_differ_by_seed():
    tasks = make_countdown_tasks(50, seed=1)
    assert tasks == make_countdown_tasks(50, seed=1) != make_countdown_tasks(50, seed=2)
    assert [t["id"] for t in tasks[:2]] == ["countdown-1-0", "countdown-1-1"]
    assert make_countdown_tasks(0) == []


@pytest.mark.parametrize("n_numbers, max_number, max_target", [(3, 20, 100), (2, 9, 20), (4, 50, 500)])
def test_every_generated_solution_scores_one(n_numbers, max_number, max_target):
    tasks = make_countdown_tasks(300, seed=7, n_numbers=n_numbers, max_number=max_number, max_target=max_target)
    for task in tasks:
        assert len(task["numbers"]) == n_numbers and all(1 <= x <= max_number for x in task["numbers"])
        assert 1 <= task["target"] <= max_target and task["target"] not in task["numbers"]
        assert score_countdown(task, f"<answer>{task['solution']}</answer>") == 1.0, task


@pytest.mark.parametrize("kwargs", [{"n": -1}, {"n_numbers": 1}, {"max_number": 0}, {"max_target": 0}])
def test_bad_arguments_say_what_to_fix(kwargs):
    with pytest.raises(ValueError, match="must be"):
        make_countdown_tasks(**{"n": 1, **kwargs})


def test_hopeless_arguments_fail_instead_of_looping():
    with pytest.raises(ValueError, match="raise max_target"):
        make_countdown_tasks(1, n_numbers=2, max_number=1, max_target=1)


@pytest.mark.parametrize(
    "expression, reason",
    [
        ("3 * (7 + 9) - 18", "uses [3, 7, 9, 18]"),  # an extra number
        ("3 * 9 + 3", "uses [3, 3, 9]"),  # a number repeated, another missing
        ("3 * 9", "uses [3, 9]"),  # a number missing
    ],
)
def test_each_number_is_used_exactly_once(expression, reason):
    ok, why = check_expression(expression, [3, 7, 9], 30)
    assert not ok and why.startswith(reason) and why.endswith("must use each of [3, 7, 9] exactly once")


def test_right_answers_pass_and_repeated_given_numbers_are_used_as_often_as_given():
    assert check_expression("3 * (9 - 7) + 24", [3, 7, 9, 24], 30) == (True, "ok")
    assert check_expression("(5 + 5) * 3", [5, 3, 5], 30) == (True, "ok")
    assert check_expression("(1 + 2) * 3 = 9", [1, 2, 3], 9) == (True, "ok")


def test_division_is_exact_and_division_by_zero_is_refused():
    assert check_expression("7 / 2 * 2", [7, 2, 2], 7) == (True, "ok")
    assert check_expression("7 / 3 * 3", [7, 3, 3], 7) == (True, "ok")
    assert check_expression("7 / 2 + 2", [7, 2, 2], 5) == (False, "equals 11/2 but the target is 5")
    assert check_expression("5 / (1 - 1)", [5, 1, 1], 5) == (False, "division by zero")


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os')",
        "2**10",
        "-3 + 7 * 9",
        "3.5 + 7 * 9",
        "x + 7 * 9",
        "abs(3) + 7 * 9",
        "3 // 7 + 9",
        "3 % 7 + 9",
        "True + 7 * 9",
        "0x3 + 7 * 9",
        "3 * 7 ; 9",
        "[3, 7, 9]",
        "3 × 7 + 9",
        "",
        "   ",
        "= 30",
    ],
)
def test_disallowed_syntax_is_refused_and_scores_zero(expression):
    ok, reason = check_expression(expression, [3, 7, 9], 30)
    assert not ok and reason
    assert score_countdown(TASK, f"<answer>{expression}</answer>", format_reward=0.1) == 0.0


def test_the_last_answer_tag_wins():
    text = "<answer>1</answer> thinking... <answer> 3 * (9 - 7) + 24 </answer>"
    assert extract_answer(text) == "3 * (9 - 7) + 24"
    assert extract_answer("<answer>a</answer><answer>b") == "a"
    assert extract_answer("no tag") is None and extract_answer("<answer>open") is None
    assert extract_answer(None) is None
    assert score_countdown(TASK, "<answer>3 * 7 + 9</answer> no, <answer>3 * 9</answer>") == 0.0
    assert score_countdown(TASK, "<answer>3 * 9</answer> no, <answer>3 * 7 + 9</answer>") == 1.0


def test_format_reward_only_for_well_formed_wrong_answers():
    def score(response):
        return score_countdown(TASK, response, format_reward=0.1)

    assert score("<answer>3 * 7 + 9</answer>") == 1.0
    assert score("<answer>3 + 7 + 9</answer>") == 0.1  # wrong value
    assert score("<answer>3 * 9 + 3</answer>") == 0.1  # wrong numbers
    assert score("<answer>9 / (7 - 7) + 3</answer>") == 0.1  # division by zero
    assert score("3 * 7 + 9") == 0.0  # no tag
    assert score("<answer>3 * 7 +</answer>") == 0.0  # unparseable
    assert score("<answer>-3 * 7 + 9</answer>") == 0.0  # disallowed syntax
    assert score_countdown(TASK, "<answer>3 + 7 + 9</answer>") == 0.0  # the default: reward is success


@pytest.mark.parametrize(
    "response",
    [
        "",
        "\x00",
        "<answer>\x00</answer>",
        "<answer>" * 100_000,
        "<answer>" + "1 + " * 1_000_000 + "1</answer>",
        "<answer>" + "(" * 10_000 + "1" + ")" * 10_000 + "</answer>",
        "<answer>" + "(" * 99 + "3" + ")" * 99 + "</answer>",
        "<answer>" + "-" * 150 + "3</answer>",
        "<answer>'\\N{bogus}'</answer>",
        "<answer>\ud800</answer>",
        "<answer>1e999999999</answer>",
        "<answer>" + "9" * 199 + "</answer>",
    ],
)
def test_garbage_scores_zero_without_raising(response):
    assert score_countdown(TASK, response, format_reward=0.1) in (0.0, 0.1)
    assert score_countdown(TASK, response) == 0.0


def test_deep_nesting_is_refused_by_check_expression():
    ok, reason = check_expression("(" * 10_000 + "3" + ")" * 10_000, [3], 3)
    assert not ok and "longer than" in reason


def test_prompt_states_numbers_target_and_answer_tag():
    prompt = countdown_prompt(TASK)
    assert "3, 7, 9" in prompt and "30" in prompt and "<answer>" in prompt and "exactly once" in prompt
    assert len(prompt) < 250  # every prompt token is paid for once per sample


def test_numbers_reward_is_partial_credit_only_for_the_right_numbers_and_never_correct():
    task = {"numbers": [3, 5, 7], "target": 22}
    assert score_countdown(task, "<answer>3 + 5 + 7</answer>", numbers_reward=0.2) == 0.2  # right numbers, = 15
    assert score_countdown(task, "<answer>3 + 5</answer>", numbers_reward=0.2, format_reward=0.1) == 0.1
    assert score_countdown(task, "<answer>3 * 5 + 7</answer>", numbers_reward=0.2) == 1.0
    assert score_countdown(task, "no tag", numbers_reward=0.2) == 0.0
    partial = countdown_reward(task, "<answer>3 + 5 + 7</answer>", numbers_reward=0.2)
    assert partial.reward == 0.2 and partial.is_correct is False and partial.info["answer"] == "3 + 5 + 7"


def test_the_builtin_task_binds_reward_args_from_the_config():
    from rllm.config import load_config
    from rllm.tasks import get_task
    from rllm.workflows.resolve import resolve_workflow

    config = load_config("configs/countdown_solver_judge.yaml", ["data.reward_args.format_reward=0.05"])
    assert config.data.reward_args == {"numbers_reward": 0.2, "format_reward": 0.05}
    _, args = resolve_workflow(get_task("countdown"), workflow=config.workflow, reward_args=config.data.reward_args)
    task = {"numbers": [3, 5, 7], "target": 22}
    assert args["reward_fn"](task, "<answer>3 + 5 + 7</answer>").reward == 0.2
    assert args["reward_fn"](task, "<answer>3 + 5</answer>").reward == 0.05
    with pytest.raises(ValueError, match="no reward function"):
        get_task("frozenlake").workflow_inputs({"format_reward": 1})

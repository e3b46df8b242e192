import pytest

from rllm import check_env
from rllm.tasks import get_task
from rllm.tasks.arithmetic import ArithmeticAgent, ArithmeticEnv, make_arithmetic_tasks, parse_last_integer


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2082", 2082),
        ("347 * 6 = 2,082", 2082),
        ("The answer is -12.", -12),
        ("no number", None),
        (None, None),
    ],
)
def test_parse_last_integer(text, expected):
    assert parse_last_integer(text) == expected


def test_tasks_are_deterministic_and_correct():
    tasks = make_arithmetic_tasks(20, seed=3)
    assert tasks == make_arithmetic_tasks(20, seed=3) != make_arithmetic_tasks(20, seed=4)
    for task in tasks:
        a, b = (int(x) for x in task["question"].removeprefix("What is ").removesuffix("?").split(" * "))
        assert 100 <= a <= 999 and 2 <= b <= 9 and task["answer"] == a * b
    assert len({t["id"] for t in tasks}) == 20


def test_one_step_rewards_the_right_number_only():
    env = ArithmeticEnv.from_dict({"question": "What is 12 * 3?", "answer": 36})
    assert env.reset() == ("What is 12 * 3?", {})
    _, reward, done, info = env.step("12 * 3 = 36")
    assert (reward, done, info["success"]) == (1.0, True, True)
    with pytest.raises(RuntimeError):
        env.step("36")
    env.reset()
    _, reward, _, info = env.step("I think 35")
    assert reward == 0.0 and info["given"] == 35 and not info["invalid_action"]


def test_env_passes_the_checker_and_is_registered():
    check_env(ArithmeticEnv, {"question": "What is 2 * 2?", "answer": 4}, actions=["4", "5", "x"])
    spec = get_task("arithmetic")
    assert spec.env_class is ArithmeticEnv and spec.agent_class is ArithmeticAgent
    assert ArithmeticAgent().chat_completions == [{"role": "system", "content": "Answer with just the number."}]

"""FeedbackEnv: attempts scored by a reward function, feedback on wrong ones, and a trajectory reward that is the last
attempt's score wherever the episode stops."""

from __future__ import annotations

import pytest

from rllm.agents.base import BaseAgent
from rllm.engine import AgentExecutionEngine
from rllm.envs.checker import check_env
from rllm.envs.feedback import WRONG, FeedbackEnv
from rllm.models.fake import FakeModel
from rllm.rewards.base import RewardOutput
from rllm.types import TerminationReason


def _score(task: dict, attempt: str, *, partial: float = 0.0) -> RewardOutput:
    if attempt.strip() == task["answer"]:
        return RewardOutput(1.0, is_correct=True)
    feedback = "too small" if attempt.strip().isdigit() and int(attempt) < int(task["answer"]) else None
    return RewardOutput(partial if attempt.strip().isdigit() else 0.0, is_correct=False, info={"feedback": feedback})


class GuessEnv(FeedbackEnv):
    prompt_fn = staticmethod(lambda task: f"Guess {task['question']}")
    reward_fn = staticmethod(_score)


def _run(script, *, max_steps, **env_args):
    engine = AgentExecutionEngine(
        agent_class=BaseAgent, env_class=GuessEnv, model=FakeModel(script), env_args=env_args, max_steps=max_steps
    )
    (episode,) = engine.execute_tasks([{"id": "t", "question": "a number", "answer": "7"}])
    return episode


def test_single_attempt_is_the_single_turn_task():
    episode = _run(["7"], max_steps=1)
    assert episode.termination_reason is TerminationReason.ENV_DONE and episode.is_correct
    assert episode.trajectories[0].reward == 1.0
    assert episode.trajectories[0].steps[0].chat_completions[0]["content"] == "Guess a number"

    episode = _run(["3"], max_steps=1)
    assert episode.termination_reason is TerminationReason.MAX_TURNS and not episode.is_correct


def test_wrong_attempts_get_feedback_and_the_model_may_revise():
    episode = _run(["3", "x", "7"], max_steps=5)
    steps = episode.trajectories[0].steps
    assert [s.observation for s in steps] == ["too small", WRONG, "Correct."]
    assert steps[1].chat_completions[-1] == {"role": "user", "content": "too small"}  # the model saw the feedback
    assert episode.is_correct and [s.info["attempt"] for s in steps] == [1, 2, 3]


def test_trajectory_reward_is_the_last_attempts_score_wherever_the_episode_stops():
    # scores with partial credit 0.25 for any number: 0.25, 0.0 ("x"), 0.25, then stopped by max_steps
    episode = _run(["3", "x", "4", "7"], max_steps=3, reward_args={"partial": 0.25})
    steps = episode.trajectories[0].steps
    assert [s.info["attempt_reward"] for s in steps] == [0.25, 0.0, 0.25]
    assert [s.reward for s in steps] == [0.25, -0.25, 0.25]  # each step: the change in score
    assert episode.trajectories[0].reward == 0.25 and not episode.is_correct
    solved = _run(["3", "7"], max_steps=3, reward_args={"partial": 0.25})
    assert solved.trajectories[0].reward == 1.0  # not 1.25: failing first is not paid


def test_max_attempts_ends_the_episode_before_max_steps():
    episode = _run(["1", "2", "3"], max_steps=5, max_attempts=2)
    assert episode.termination_reason is TerminationReason.ENV_DONE and len(episode.trajectories[0].steps) == 2
    with pytest.raises(ValueError, match="max_attempts"):
        GuessEnv({"answer": "1"}, max_attempts=0)


def test_a_bad_reward_function_result_is_an_error_not_a_zero():
    class Broken(GuessEnv):
        reward_fn = staticmethod(lambda task, attempt: None)

    engine = AgentExecutionEngine(
        agent_class=BaseAgent, env_class=Broken, model=FakeModel("7"), max_steps=1, retry_limit=0
    )
    (episode,) = engine.execute_tasks([{"question": "q", "answer": "7"}])
    assert episode.termination_reason is TerminationReason.INFRA_ERROR  # env code raised: counted, never trained on
    assert "return a float or rllm.rewards.RewardOutput" in episode.info["error"]


def test_passes_the_env_checker():
    report = check_env(GuessEnv, {"question": "q", "answer": "7"}, actions=["3", "7"])
    assert report.problems == [] and report.warnings == []
    assert report.episodes_done == report.episodes and report.mean_return == 1.0  # "3" then "7": solved


def test_multi_turn_code_agent_repairs_its_code_after_seeing_the_failing_test():
    from rllm.tasks.code import CodeAgent, CodeEnv, make_code_tasks

    task = make_code_tasks(1, seed=0)[0]  # dedupe(xs): keep the first occurrence of each number, in order
    wrong = "```python\ndef dedupe(xs):\n    return sorted(set(xs))\n```"
    right = f"```python\n{task['solution']}```"
    engine = AgentExecutionEngine(
        agent_class=CodeAgent, env_class=CodeEnv, model=FakeModel([wrong, right]), max_steps=3
    )
    (episode,) = engine.execute_tasks([task])
    steps = episode.trajectories[0].steps
    assert episode.is_correct and len(steps) == 2 and episode.trajectories[0].reward == 1.0
    feedback = steps[1].chat_completions[-1]["content"]  # what the model saw before its second attempt
    assert "dedupe" in feedback and "[0, 2, 4, 3]" in feedback  # the failing call and the expected value


def test_multi_turn_math_agent_gets_a_second_try():
    from rllm.tasks.math import MathAgent, MathEnv

    task = {"id": "m", "question": "What is 1/2 + 1/4?", "answer": "\\frac{3}{4}"}
    engine = AgentExecutionEngine(
        agent_class=MathAgent, env_class=MathEnv, model=FakeModel(["\\boxed{0.5}", "So \\boxed{0.75}"]), max_steps=2
    )
    (episode,) = engine.execute_tasks([task])
    assert [s.info["attempt_reward"] for s in episode.trajectories[0].steps] == [0.0, 1.0]  # 0.75 = 3/4, verified
    assert episode.is_correct and episode.trajectories[0].steps[0].chat_completions[0]["role"] == "system"

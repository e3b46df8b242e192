"""rLLM v0.2's `rllm.rewards.countdown_reward.countdown_reward_fn(task_info, action)`, over rllm's countdown scorer
(`rllm.tasks.countdown.score_countdown`): the last `<answer>...</answer>` must use each of `task_info["nums"]` once
and equal `task_info["target"]`. As in rLLM the reward is 1.0 or 0.0 (partial credit is reported in `metadata`, never
paid). One difference: the expression is checked in exact arithmetic (rLLM evaluates floats with a 1e-5 tolerance),
and Python's `eval` is never used."""

from __future__ import annotations

from typing import Any

from rllm.rewards.base import RewardOutput
from rllm.tasks.countdown import extract_answer, score_countdown
from rllm.types import Action

__all__ = ["countdown_reward_fn"]


def countdown_reward_fn(task_info: dict, action: Any) -> RewardOutput:
    if isinstance(action, Action):
        action = action.action
    target, nums = task_info.get("target"), task_info.get("nums") or []
    if target is None or not nums:
        return RewardOutput(reward=0.0, is_correct=False, info={"error": "the task has no target or nums"})
    score = score_countdown({"numbers": list(nums), "target": target}, str(action), format_reward=0.1)
    validation = "correct_solution" if score >= 1.0 else "partial_credit" if score > 0 else "incorrect_solution"
    correct = score >= 1.0
    info = {"validation": validation, "answer": extract_answer(str(action))}
    return RewardOutput(reward=1.0 if correct else 0.0, is_correct=correct, info=info)

"""`FeedbackEnv`: an answer-checking environment for tasks scored by a reward function (math, code).

Each action is an attempt at the task, scored by `reward_fn(task, attempt)`. A correct attempt ends the episode; a
wrong one gets feedback (the reward function's `info["feedback"]` when it gives one, e.g. the failing test of a
program, else a plain "not correct") and another try. With one model call per episode (`max_steps=1` in the
engine) this is the single-turn task; with more, the multi-turn variant that may revise its previous answer.

Choices:
- A step's reward is the change in the attempt's score (score_t - score_{t-1}, each score in `info["attempt_reward"]`),
  so the trajectory reward (the sum of step rewards) is the score of the LAST attempt, wherever the episode stops
  (solved, `max_attempts`, or the engine's `max_steps`, which the env cannot see). Summing raw per-attempt scores
  would pay a policy for failing slowly when partial credit is configured.
- `max_attempts` (None: as many as the engine's `max_steps` allows) ends the episode after that many attempts.
- `info["success"]` on the last step says whether the task was solved; the engine reads it for `is_correct`.
- Subclasses set `prompt_fn` and `reward_fn` (as staticmethods); `reward_args` from the env args are bound to the
  reward function (e.g. a format reward).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllm.envs.base import BaseEnv
from rllm.rewards.base import to_reward_output

__all__ = ["FeedbackEnv"]

WRONG = "That is not correct. Look at your answer again and give a corrected one."


class FeedbackEnv(BaseEnv):
    prompt_fn: Callable[[dict], str]
    reward_fn: Callable[..., Any]

    def __init__(self, task: dict, *, max_attempts: int | None = None, reward_args: dict | None = None) -> None:
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None, got {max_attempts}")
        self.task, self.max_attempts, self.reward_args = task, max_attempts, dict(reward_args or {})
        self.attempts, self.done, self.last_score = 0, False, 0.0

    @classmethod
    def from_dict(cls, task: dict) -> FeedbackEnv:
        task = dict(task)
        max_attempts = task.pop("max_attempts", None)
        reward_args = task.pop("reward_args", None)
        return cls(task, max_attempts=max_attempts, reward_args=reward_args)

    def reset(self) -> tuple[Any, dict]:
        self.attempts, self.done, self.last_score = 0, False, 0.0
        return type(self).prompt_fn(self.task), {}

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        if self.done:
            raise RuntimeError("the episode is over; call reset() first")
        self.attempts += 1
        reward_fn = type(self).reward_fn
        result = to_reward_output(
            reward_fn(self.task, "" if action is None else str(action), **self.reward_args), reward_fn
        )
        out_of_attempts = self.max_attempts is not None and self.attempts >= self.max_attempts
        self.done = result.correct or out_of_attempts
        info = {
            "success": result.correct,
            "attempt": self.attempts,
            "attempt_reward": result.reward,
            **{k: v for k, v in result.info.items() if k != "feedback"},
        }
        feedback = "Correct." if result.correct else str(result.info.get("feedback") or WRONG)
        reward, self.last_score = result.reward - self.last_score, result.reward
        return feedback, reward, self.done, info

"""What a reward function returns, and the one place its result is checked.

A reward function is `fn(task: dict, response: str) -> float | RewardOutput`. Return a plain float when reward and
correctness agree (correct means reward > 0); return `RewardOutput` when they differ (a format bonus on a wrong
answer is positive but not correct) or to keep details for the episode log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rllm.errors import RllmError

__all__ = ["RewardOutput", "to_reward_output"]


@dataclass(frozen=True)
class RewardOutput:
    reward: float
    is_correct: bool | None = None  # None: correct means reward > 0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.is_correct if self.is_correct is not None else self.reward > 0


class RewardError(RllmError, ValueError):
    """A reward that cannot be trained on (not a finite number). The episode ends as an error and its trajectories
    are left out of training, counted (`batch/excluded_reward_error`): never read as 0."""


def refuse_reward(message: str) -> RewardError:
    """A `RewardError` tagged as raised by reward code, wherever it is raised (env or workflow)."""
    from rllm.workflows.runtime import tag_site

    error = RewardError(message)
    tag_site(error, "reward")
    return error


def to_reward_output(value: Any, fn: Any = None) -> RewardOutput:
    """Normalise a reward function's result; a value that is not a finite number is refused, not read as 0."""
    if isinstance(value, RewardOutput):
        reward = value.reward
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        reward, value = float(value), RewardOutput(float(value))
    else:
        name = getattr(fn, "__qualname__", "the reward function")
        raise TypeError(
            f"{name} returned {type(value).__name__} {value!r}; return a float or rllm.rewards.RewardOutput"
        )
    if not math.isfinite(reward):
        name = getattr(fn, "__qualname__", "the reward function")
        raise refuse_reward(f"{name} returned a non-finite reward {reward!r}; return a finite float")
    return value

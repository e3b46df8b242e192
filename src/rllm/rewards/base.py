"""What a reward function returns, and the one place its result is checked.

A reward function is `fn(task: dict, response: str) -> float | RewardOutput`. Return a plain float when reward and
correctness agree (correct means reward > 0); return `RewardOutput` when they differ (a format bonus on a wrong
answer is positive but not correct) or to keep details for the episode log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rllm.errors import RllmError, tag_site

__all__ = ["RewardOutput", "to_reward_output"]


@dataclass(frozen=True, init=False)
class RewardOutput:
    """`info` is also accepted and read as `metadata`, rLLM v0.2's name for it, so rLLM reward functions that
    return `RewardOutput(reward=..., metadata=..., is_correct=...)` and callers reading `.metadata` work unchanged."""

    reward: float
    is_correct: bool | None = None  # None: correct means reward > 0
    info: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        reward: float,
        is_correct: bool | None = None,
        info: dict[str, Any] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if info is not None and metadata is not None:
            raise TypeError("RewardOutput takes info= or metadata= (rLLM's name for the same field), not both")
        object.__setattr__(self, "reward", reward)
        object.__setattr__(self, "is_correct", is_correct)
        if info is None:
            info = {} if metadata is None else metadata
        object.__setattr__(self, "info", info)

    @property
    def metadata(self) -> dict[str, Any]:
        return self.info

    @property
    def correct(self) -> bool:
        return self.is_correct if self.is_correct is not None else self.reward > 0


class RewardError(RllmError, ValueError):
    """A reward that cannot be trained on (not a finite number). The episode ends as an error and its trajectories
    are left out of training, counted (`batch/excluded_reward_error`): never read as 0."""


def refuse_reward(message: str) -> RewardError:
    """A `RewardError` tagged as raised by reward code, wherever it is raised (env or workflow)."""
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

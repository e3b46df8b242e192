"""rLLM v0.2's `rllm.rewards.reward_types`, for reward code written against rLLM.

`RewardOutput` is rllm's own (`rllm.rewards.base`): it takes rLLM's `RewardOutput(reward=..., metadata=...,
is_correct=...)` and reads `.metadata` (rllm's `info`). `RewardInput`, `RewardType` and `RewardConfig` are rLLM's
plain data types with rLLM's fields and defaults; `RewardConfig`'s `correct_reward`, `incorrect_reward`,
`format_error_reward`, `unk_error_reward` and `toolcall_bonus` are what `rllm.rewards.reward_fn.math_reward_fn` pays.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from rllm.rewards.base import RewardOutput

__all__ = ["RewardConfig", "RewardInput", "RewardOutput", "RewardType"]


class RewardType(Enum):
    MATH = "MATH"
    CODE = "CODE"
    WEB = "WEB"
    UNK = "UNK"


@dataclass(slots=True, kw_only=True)
class RewardInput:
    task_info: dict
    action: str


@dataclass
class RewardConfig:
    apply_format_reward: bool = False
    math_reward_weight: float = 1.0
    use_math_orm: bool = False
    code_reward_weight: float = 1.0
    cot_reward_weight: float = 0.0
    correct_reward: float = 1.0
    incorrect_reward: float = 0.0
    format_error_reward: float = 0.0
    unk_error_reward: float = 0.0
    toolcall_bonus: float = 0.5
    use_together_code_interpreter: bool = False

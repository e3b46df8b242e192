"""rLLM v0.2's `rllm.rewards.reward_fn`: the reward-function protocol `fn(task_info, action) -> RewardOutput` and
rLLM's ready-made ones, for code written against rLLM. Each is called by keyword (`reward_fn(task_info=...,
action=...)`, as rLLM's envs do) or positionally (as its workflows do), and unwraps an `Action`.

- `math_reward_fn`: `RewardMathFn(RewardConfig())` (DeepScaleR; `rllm.rewards.math_reward`).
- `code_reward_fn`: `RewardCodeFn(RewardConfig())` (DeepCoder; `rllm.rewards.code_reward`), in rllm's sandbox.
- `search_reward_fn`: `RewardSearchFn(RewardConfig())` on a `RewardInput` (`rllm.rewards.search_reward`).
- `f1_reward_fn`: the token F1 of the whole reply against `task_info["ground_truth"]` (SQuAD normalisation), as
  the reward, with no answer extraction; 0.0 when either side is empty.
- `zero_reward`: always 0.0.
`RewardConfig`, `RewardInput` and `RewardOutput` are importable from here too, as in rLLM.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rllm.compat.rewards.reward_types import RewardConfig, RewardInput
from rllm.rewards.base import RewardOutput

__all__ = [
    "RewardConfig",
    "RewardFunction",
    "RewardInput",
    "RewardOutput",
    "code_reward_fn",
    "f1_reward_fn",
    "math_reward_fn",
    "search_reward_fn",
    "zero_reward",
]


@runtime_checkable
class RewardFunction(Protocol):
    def __call__(self, task_info: dict, action: str) -> RewardOutput: ...


def zero_reward(task_info: dict, action: Any) -> RewardOutput:
    return RewardOutput(reward=0.0, metadata={})


def math_reward_fn(task_info: dict, action: Any) -> RewardOutput:
    from rllm.compat.rewards.math_reward import RewardMathFn

    return RewardMathFn(RewardConfig())(task_info, _text(action))


def code_reward_fn(task_info: dict, action: Any) -> RewardOutput:
    from rllm.compat.rewards.code_reward import RewardCodeFn

    return RewardCodeFn(RewardConfig())(task_info, _text(action))


def search_reward_fn(task_info: dict, action: Any) -> RewardOutput:
    from rllm.compat.rewards.search_reward import RewardSearchFn

    return RewardSearchFn(RewardConfig())(RewardInput(task_info=task_info, action=_text(action)))


def f1_reward_fn(task_info: dict, action: Any) -> RewardOutput:
    from rllm.compat.rewards.search_reward import token_f1

    truth = task_info.get("ground_truth")
    f1, _, _ = token_f1(str(_text(action)), "" if truth is None else str(truth), closed_classes=False)
    return RewardOutput(reward=f1, metadata={})


def _text(action: Any) -> Any:
    from rllm.types import Action

    return action.action if isinstance(action, Action) else action

"""rLLM v0.2's `rllm.rewards.reward_fn`: `RewardFunction` (the protocol `fn(task_info, action) -> RewardOutput`),
`zero_reward` and `math_reward_fn`, for code written against rLLM. Called by keyword (`reward_fn(task_info=...,
action=...)`, as rLLM's envs do) or positionally (as its workflows do); an `Action` is unwrapped.

`math_reward_fn` keeps rLLM's rules and uses rllm's math grader (`rllm.rewards.math`) to compare:
- an empty reply scores `format_error_reward` (0.0); with `</think>` in the reply only the text after the first
  `</think>` counts;
- the answer is the last `<|begin_of_box|>...<|end_of_box|>`, else the last `\\boxed{...}`/`\\fbox{...}`; none scores
  0.0 (rllm's own `math_reward` also reads "final answer: X" lines; rLLM's does not, and neither does this);
- `task_info["ground_truth"]` is one answer or a list of them (a `\\boxed{}` one is unboxed); missing, 0.0;
- correct when it equals any of them by `rllm.rewards.math.math_equal` (verified equivalence, where rLLM uses its
  mathd/sympy graders): 1.0, plus 0.5 when `task_info.get("has_toolcall")`, and `is_correct=True`; else 0.0.
`metadata` holds the extracted answer (rLLM's is empty). Rewards come from a `RewardConfig()`'s values.

rLLM's `code_reward_fn`, `search_reward_fn` and `f1_reward_fn` are not here: importing one says what to use instead.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

from rllm.compat.rewards.reward_types import RewardConfig
from rllm.rewards.base import RewardOutput

__all__ = ["RewardFunction", "math_reward_fn", "zero_reward"]

_GLM_BOX = re.compile(r"<\|begin_of_box\|>([\s\S]*?)<\|end_of_box\|>")
_NOT_HERE = {
    "code_reward_fn": "rllm.rewards.code.code_reward(task, response) (tests in task['tests'], run in rllm's sandbox)",
    "search_reward_fn": "a reward function of your own over rllm.rewards.math.normalize_answer",
    "f1_reward_fn": "a reward function of your own over rllm.rewards.math.normalize_answer",
}


@runtime_checkable
class RewardFunction(Protocol):
    def __call__(self, task_info: dict, action: str) -> RewardOutput: ...


def zero_reward(task_info: dict, action: Any) -> RewardOutput:
    return RewardOutput(reward=0.0, metadata={})


def math_reward_fn(task_info: dict, action: Any) -> RewardOutput:
    from rllm.rewards.math import extract_boxed, math_equal
    from rllm.types import Action

    config = RewardConfig()
    response = action.action if isinstance(action, Action) else action
    if response is None or response == "":
        return RewardOutput(reward=config.format_error_reward, is_correct=False)
    response = str(response)
    solution = response.split("</think>")[1] if "</think>" in response else response
    answer = _extract_answer(solution, extract_boxed)
    if answer is None:
        return RewardOutput(reward=config.format_error_reward, is_correct=False, metadata={"extracted": None})
    truths = task_info.get("ground_truth")
    if truths is None:
        return RewardOutput(reward=config.unk_error_reward, is_correct=False, metadata={"extracted": answer})
    if isinstance(truths, str | float | int):
        truths = [truths]
    references = [_extract_answer(str(t), extract_boxed) if "\\boxed" in str(t) else str(t) for t in truths]
    references = [r for r in references if r is not None]
    if not references:
        return RewardOutput(reward=config.unk_error_reward, is_correct=False, metadata={"extracted": answer})
    if any(math_equal(answer, reference) for reference in references):
        reward = config.correct_reward + (config.toolcall_bonus if task_info.get("has_toolcall", False) else 0.0)
        return RewardOutput(reward=reward, is_correct=True, metadata={"extracted": answer})
    return RewardOutput(reward=config.incorrect_reward, is_correct=False, metadata={"extracted": answer})


def _extract_answer(text: str, extract_boxed: Any) -> str | None:
    boxes = _GLM_BOX.findall(text)
    if boxes:
        return boxes[-1].strip()
    return extract_boxed(text)


class RewardFunctionNotAvailable(ImportError):
    """An rLLM reward function rllm does not have. An ImportError, so that `from rllm.rewards.reward_fn import
    code_reward_fn` shows this message (Python replaces an AttributeError's message with its own)."""


def __getattr__(name: str) -> Any:
    if name in _NOT_HERE:
        raise RewardFunctionNotAvailable(f"rLLM's {name} is not available in rllm; use {_NOT_HERE[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

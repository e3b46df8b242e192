"""rLLM v0.2's `rllm.rewards.math_reward`: DeepScaleR's reward, `RewardMathFn(config)(task_info, action)`, over
rllm's math grader (`rllm.rewards.math`: math-verify in a worker process, with a hard timeout).

rLLM's rules, paid from the `RewardConfig` given:
- an empty or None reply: `format_error_reward`;
- with `</think>` in the reply only the text after it counts (up to a second `</think>`, as rLLM splits); without one,
  `apply_format_reward=True` pays `format_error_reward`, otherwise the whole reply counts;
- the answer is the last `<|begin_of_box|>...<|end_of_box|>` (GLM), else the last `\\boxed{...}`/`\\fbox{...}`;
  none: `format_error_reward` (a "final answer: X" line is not read, as in rLLM);
- `task_info["ground_truth"]` is one answer (str, int or float) or a list of them; a `\\boxed{}` one is unboxed;
  missing or none left: `unk_error_reward`;
- equal to any of them as mathematics (`rllm.rewards.math.math_equal`, where rLLM asks its mathd and sympy
  graders): `correct_reward`, plus `toolcall_bonus` when `task_info.get("has_toolcall")`; else `incorrect_reward`.
`metadata` holds the extracted answer (rLLM leaves it empty). `use_math_orm` (an LLM judge over an API) is not
supported: the grader alone decides, and the flag is ignored.
"""

from __future__ import annotations

import re
from typing import Any

from rllm.compat.rewards.reward_types import RewardConfig, RewardType
from rllm.rewards.base import RewardOutput

__all__ = ["RewardMathFn", "extract_math_answer", "rllm_reward_fn_math"]

THINK_END = "</think>"
_GLM_BOX = re.compile(r"<\|begin_of_box\|>([\s\S]*?)<\|end_of_box\|>")


def extract_math_answer(text: str) -> str | None:
    """The reply's final answer as rLLM's math reward reads it: the last GLM box, else the last `\\boxed{}`."""
    from rllm.rewards.math import extract_boxed

    boxes = _GLM_BOX.findall(text)
    return boxes[-1].strip() if boxes else extract_boxed(text)


class RewardMathFn:
    """DeepScaleR's math reward (see the module docstring). Call it as `fn(task_info, action)`."""

    def __init__(self, config: RewardConfig | None = None) -> None:
        self.config = config if config is not None else RewardConfig()

    def __call__(self, task_info: dict, action: Any) -> RewardOutput:
        from rllm.types import Action

        config = self.config
        response = action.action if isinstance(action, Action) else action
        if response is None or response == "":
            return RewardOutput(reward=config.format_error_reward, is_correct=False)
        solution = self._solution(str(response))
        answer = None if solution is None else extract_math_answer(solution)
        if answer is None:
            return RewardOutput(reward=config.format_error_reward, is_correct=False, metadata={"extracted": None})
        references = _references(task_info.get("ground_truth"))
        if not references:
            return RewardOutput(reward=config.unk_error_reward, is_correct=False, metadata={"extracted": answer})
        if _matches_any(answer, references):
            bonus = config.toolcall_bonus if task_info.get("has_toolcall", False) else 0.0
            return RewardOutput(reward=config.correct_reward + bonus, is_correct=True, metadata={"extracted": answer})
        return RewardOutput(reward=config.incorrect_reward, is_correct=False, metadata={"extracted": answer})

    def _solution(self, response: str) -> str | None:
        """The part of the reply that is graded; None when the config demands a `</think>` and there is none."""
        if THINK_END in response:
            return response.split(THINK_END)[1]
        return None if self.config.apply_format_reward else response


def _references(ground_truth: Any) -> list[str]:
    if ground_truth is None:
        return []
    truths = [ground_truth] if isinstance(ground_truth, str | int | float) else list(ground_truth)
    references = []
    for truth in map(str, truths):
        reference = extract_math_answer(truth) if "\\boxed" in truth else truth
        if reference is not None:
            references.append(reference)
    return references


def _matches_any(answer: str, references: list[str]) -> bool:
    from rllm.rewards.math import math_equal

    return any(math_equal(answer, reference) for reference in references)


def rllm_reward_fn_math(
    data_source: str, llm_solution: str, ground_truth: str | list[str], extra_info: dict | None = None, **kwargs: Any
) -> RewardOutput:
    """rLLM's verl-style entry point: `RewardMathFn(RewardConfig())` on a task built from the arguments."""
    task_info = {
        "problem": None,
        "problem_type": RewardType.MATH,
        "data_source": data_source,
        "ground_truth": ground_truth,
        **(extra_info or {}),
    }
    return RewardMathFn(RewardConfig())(task_info, llm_solution)

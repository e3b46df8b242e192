"""`MathEnv`: the math task's FeedbackEnv: prompt from `rllm.data.math`, verified reward from `rllm.rewards.math`."""

from __future__ import annotations

from rllm.data.math import math_prompt
from rllm.envs.feedback import FeedbackEnv
from rllm.rewards.math import math_reward

__all__ = ["MathEnv"]


class MathEnv(FeedbackEnv):
    prompt_fn = staticmethod(math_prompt)
    reward_fn = staticmethod(math_reward)

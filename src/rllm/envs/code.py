"""`CodeEnv`: the code tasks' FeedbackEnv: prompt from `rllm.data.code`, reward from running the task's tests in the
sandbox (`rllm.rewards.code`); a failing attempt's feedback is the first failing test."""

from __future__ import annotations

from rllm.data.code import code_prompt
from rllm.envs.feedback import FeedbackEnv
from rllm.rewards.code import code_reward

__all__ = ["CodeEnv"]


class CodeEnv(FeedbackEnv):
    prompt_fn = staticmethod(code_prompt)
    reward_fn = staticmethod(code_reward)

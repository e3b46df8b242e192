"""`MathAgent`: solves a math problem with reasoning and a final `\\boxed{}` answer; with `MathEnv` (a FeedbackEnv)
and more than one step it sees "not correct" feedback and may revise its answer. The reply's text is the action:
the reward function extracts and verifies the boxed answer (`rllm.rewards.math`)."""

from __future__ import annotations

from rllm.agents.base import BaseAgent

__all__ = ["MATH_SYSTEM_PROMPT", "MathAgent"]

MATH_SYSTEM_PROMPT = "You are a careful math solver. Reason step by step, then put the final answer in \\boxed{}."


class MathAgent(BaseAgent):
    system_prompt = MATH_SYSTEM_PROMPT

"""`MathAgent`: solves a math problem with reasoning and a final `\\boxed{}` answer; with `MathEnv` (a FeedbackEnv)
and more than one step it sees "not correct" feedback and may revise its answer. The reply's text is the action:
the reward function extracts and verifies the boxed answer (`rllm.rewards.math`)."""

from __future__ import annotations

from rllm.agents.base import BaseAgent

__all__ = ["MATH_SYSTEM_PROMPT", "MathAgent"]

# Brevity matters on a CPU: asked to "reason step by step" the embedded 0.5B model ran past 200 tokens on 13 of 16
# problems before writing its answer; this prompt got 3/16 right against 0/16 (greedy, same 16 problems).
MATH_SYSTEM_PROMPT = "You are a concise math solver. Show only the key calculation, then the final answer in \\boxed{}."


class MathAgent(BaseAgent):
    system_prompt = MATH_SYSTEM_PROMPT

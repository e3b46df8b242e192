"""`CodeAgent`: writes a Python program or function in one ```python block; with `CodeEnv` (a FeedbackEnv) and more
than one step it gets the first failing test's output and repairs its code. The reply's text is the action: the
reward function extracts the last code block and runs the tests in the sandbox (`rllm.rewards.code`)."""

from __future__ import annotations

from rllm.agents.base import BaseAgent

__all__ = ["CODE_SYSTEM_PROMPT", "CodeAgent"]

CODE_SYSTEM_PROMPT = "You are an expert Python programmer. Reply with the complete solution in one ```python block."


class CodeAgent(BaseAgent):
    system_prompt = CODE_SYSTEM_PROMPT

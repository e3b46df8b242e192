"""The agent of the arithmetic task: a short system prompt and the question; the env parses the reply."""

from __future__ import annotations

from rllm.agents.base import BaseAgent

__all__ = ["ArithmeticAgent"]


class ArithmeticAgent(BaseAgent):
    # Replaces the chat template's default system prompt (Qwen's is ~20 tokens) with a shorter, useful one.
    system_prompt = "Answer with just the number."

"""Agents: `BaseAgent` and reusable agents (tool calling), one file each.

The agents of built-in tasks live with their task in `rllm.tasks`."""

from rllm.agents.base import BaseAgent

__all__ = ["BaseAgent"]

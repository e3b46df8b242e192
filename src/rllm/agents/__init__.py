"""Agents: `BaseAgent` and the built-in agents, one file each."""

from rllm.agents.base import BaseAgent

__all__ = ["BaseAgent"]

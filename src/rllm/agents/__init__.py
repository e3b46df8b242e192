"""Agents: `BaseAgent` and reusable agents (tool calling), one file each.

The agents of built-in tasks live with their task in `rllm.tasks` (SWE's and web's too). rLLM v0.2's agents
(`rllm.agents.tool_agent`, `from rllm.agents import ToolAgent`, ...) are in `rllm.compat.agents`, served here by the
rule in `rllm.compat`."""

from rllm.agents.base import BaseAgent

__all__ = ["BaseAgent"]

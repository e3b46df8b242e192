"""Agents: `BaseAgent` and reusable agents (tool calling), one file each.

The agents of built-in tasks live with their task in `rllm.tasks`. `ToolAgent` here is rLLM v0.2's (text protocol,
`rllm.agents.tool_agent`), the name rLLM's examples import; rllm's own tool agent is `rllm.agents.tool.ToolAgent`."""

from rllm.agents.base import BaseAgent
from rllm.agents.tool_agent import ToolAgent

__all__ = ["BaseAgent", "ToolAgent"]

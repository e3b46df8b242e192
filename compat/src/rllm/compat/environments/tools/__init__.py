"""rLLM v0.2's `rllm.environments.tools`: `ToolEnvironment`, the env side of rLLM's `ToolAgent`, over rllm's tools."""

from rllm.compat.environments.tools.tool_env import ToolEnvironment

__all__ = ["ToolEnvironment"]

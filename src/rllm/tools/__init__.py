"""Tools for agents: the `Tool` base class and `@tool` decorator, `ToolRegistry` (runs calls, never raises for the
model's mistakes), tool-call parsing from completion text, and built-in tools. The MCP client is
`rllm.tools.mcp` (imported on its own: it needs the optional `mcp` SDK)."""

from rllm.tools.base import FunctionTool, Tool, ToolRegistry, ToolResult, tool, validate_arguments
from rllm.tools.builtin import BUILTIN_TOOLS, DocumentSearch, PythonTool, calculator, python_tool
from rllm.tools.parsing import (
    ERROR_KINDS,
    ParsedToolCalls,
    ToolCallError,
    detect_family,
    parse_tool_calls,
    template_renders_tools,
    tools_system_prompt,
)

__all__ = [
    "BUILTIN_TOOLS",
    "ERROR_KINDS",
    "DocumentSearch",
    "FunctionTool",
    "ParsedToolCalls",
    "PythonTool",
    "Tool",
    "ToolCallError",
    "ToolRegistry",
    "ToolResult",
    "calculator",
    "detect_family",
    "parse_tool_calls",
    "python_tool",
    "template_renders_tools",
    "tool",
    "tools_system_prompt",
    "validate_arguments",
]

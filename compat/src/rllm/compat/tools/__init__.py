"""rLLM v0.2's `rllm.tools` names. Served at `rllm.tools` where rllm's own package does not define the name.

One name collides: `rllm.tools.ToolRegistry` is rllm's (it runs tool calls); rLLM's registry of tool classes is
`rllm.tools.registry.ToolRegistry`, and its process-wide instance `rllm.tools.tool_registry` is served here.
"""

from rllm.compat._lazy import lazy_names

_WHERE = {
    "DEFAULT_TOOLS": "registry",
    "FirecrawlTool": "web_tools",
    "GoogleSearchTool": "web_tools",
    "PythonInterpreter": "code_tools",
    "TavilyExtractTool": "web_tools",
    "TavilySearchTool": "web_tools",
    "ToolRegistry": "registry",  # rllm's own rllm.tools.ToolRegistry wins at package level
    "tool_registry": "registry",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)

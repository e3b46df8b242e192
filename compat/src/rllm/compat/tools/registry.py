"""rLLM v0.2's registry of tool classes by name (`rllm.tools.registry.ToolRegistry`) and its one instance,
`rllm.tools.tool_registry`, which `tools=["python", ...]` looks names up in.

As in rLLM, `ToolRegistry()` always returns that one instance, and its defaults are "python" (rllm's sandboxed
`PythonInterpreter`) and rLLM's web tools ("google_search", "firecrawl", "tavily-extract", "tavily-search"), which
build but raise when run (`rllm.tools.web_tools`). `register(name, cls)` takes rLLM `Tool` subclasses and rllm's own
`rllm.tools.Tool` subclasses alike.

Not to be confused with rllm's own `rllm.tools.ToolRegistry`, which runs the calls of one agent's tools (and is the
one `from rllm.tools import ToolRegistry` gives).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rllm.compat.tools.tool_base import Tool

__all__ = ["DEFAULT_TOOLS", "ToolRegistry", "tool_registry"]


def _is_tool_class(value: Any) -> bool:
    from rllm.tools.base import Tool as NativeTool

    return isinstance(value, type) and issubclass(value, (Tool, NativeTool))


class ToolRegistry:
    """Tool classes by name; one per process (`ToolRegistry() is tool_registry`)."""

    _instance: ToolRegistry | None = None

    def __new__(cls) -> ToolRegistry:
        if cls._instance is None:
            instance = super().__new__(cls)
            instance._tools = {}
            cls._instance = instance
        return cls._instance

    _tools: dict[str, type]

    def register(self, name: str, tool_cls: type) -> None:
        if not _is_tool_class(tool_cls):
            raise TypeError(f"Tool class must be a subclass of Tool (rLLM's or rllm's), got {tool_cls!r}")
        self._tools[name] = tool_cls

    def register_all(self, tools_dict: dict[str, type]) -> None:
        for name, tool_cls in tools_dict.items():
            self.register(name, tool_cls)

    def get(self, name: str) -> type | None:
        return self._tools.get(name)

    def instantiate(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """An instance of the tool registered as `name` (None if there is none)."""
        tool_cls = self._tools.get(name)
        return None if tool_cls is None else tool_cls(*args, **kwargs)

    def list_tools(self) -> list[str]:
        return list(self._tools)

    def clear(self) -> None:
        self._tools.clear()

    def unregister(self, name: str) -> bool:
        return self._tools.pop(name, None) is not None

    def to_dict(self) -> dict[str, type]:
        return self._tools

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> type:
        if name not in self._tools:
            raise KeyError(f"Tool '{name}' not found in registry")
        return self._tools[name]

    def __setitem__(self, name: str, tool_cls: type) -> None:
        self.register(name, tool_cls)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


def _default_tools() -> dict[str, type]:
    from rllm.compat.tools.code_tools.python_interpreter import PythonInterpreter
    from rllm.compat.tools.web_tools import FirecrawlTool, GoogleSearchTool, TavilyExtractTool, TavilySearchTool

    return {
        "python": PythonInterpreter,
        "google_search": GoogleSearchTool,
        "firecrawl": FirecrawlTool,
        "tavily-extract": TavilyExtractTool,
        "tavily-search": TavilySearchTool,
    }


DEFAULT_TOOLS = _default_tools()
tool_registry = ToolRegistry()
tool_registry.register_all(DEFAULT_TOOLS)

"""rLLM v0.2's `MultiTool` (`rllm.tools.multi_tool`): the tools of one `ToolAgent` / `ToolEnvironment` by name.

`MultiTool(tools=["python"])` looks the names up in rLLM's registry (`rllm.tools.tool_registry`);
`MultiTool(tool_map={"name": ToolClass})` instantiates each class with `name=<key>`, as rLLM does. A `tool_map`
value may also be an instance, and may be one of rllm's own tools (`rllm.tools.Tool` subclasses, `@rllm.tools.tool`
functions): those are wrapped in `NativeTool`, which runs them through rllm's `rllm.tools.ToolRegistry` (arguments
checked against the schema, a timeout, the result capped) and returns a `ToolOutput`.

`json` is the list of the tools' schemas; `forward(tool_name=..., **arguments)` runs one call (a tool that implements
only `async_forward` is run to completion; rLLM would call its missing `forward`). An unknown name gives a
`ToolOutput` whose error lists the tools there are.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from rllm.compat.tools.tool_base import Tool, ToolOutput
from rllm.errors import RllmError

__all__ = ["NATIVE_TOOL_TIMEOUT_S", "MultiTool", "NativeTool", "as_rllm_tool"]

NATIVE_TOOL_TIMEOUT_S = 60.0


class UnknownToolError(RllmError, ValueError):
    """A `tools=[...]` name that rLLM's registry does not hold."""


class NativeTool(Tool):
    """One of rllm's own tools (`call`/`acall`, `schema()`) as an rLLM `Tool` (`forward`, `json`)."""

    def __init__(self, tool: Any, name: str | None = None, timeout_s: float = NATIVE_TOOL_TIMEOUT_S) -> None:
        from rllm.tools.base import ToolRegistry as Runner

        if name is not None and tool.name != name:  # rLLM calls a tool_map tool by its key
            tool = copy.copy(tool)
            tool.name = name
        self.native = tool
        self.timeout_s = timeout_s
        self._runner = Runner([tool])
        super().__init__(name=tool.name, description=tool.description)

    @property
    def json(self) -> dict[str, Any]:
        return self.native.schema()

    def forward(self, **arguments: Any) -> ToolOutput:
        from rllm.tools.base import run_coroutine

        return run_coroutine(self.async_forward(**arguments))

    async def async_forward(self, **arguments: Any) -> ToolOutput:
        result = await self._runner.call(self.name, arguments, timeout_s=self.timeout_s)
        if result.is_error:
            return ToolOutput(name=self.name, error=result.content, metadata={"error_kind": result.error_kind})
        return ToolOutput(name=self.name, output=result.content)


def as_rllm_tool(name: str, value: Any) -> Tool:
    """A `tool_map` value (an rLLM or rllm tool, class or instance) as an rLLM `Tool` called `name`."""
    from rllm.tools.base import Tool as NativeBase

    if isinstance(value, type) and issubclass(value, Tool):
        return value(name=name) if _takes_name(value) else _renamed(value(), name)
    if isinstance(value, Tool):
        return value
    if isinstance(value, type) and issubclass(value, NativeBase):
        value = value()
    if isinstance(value, NativeBase):
        return NativeTool(value, name=name)
    raise TypeError(
        f"tool_map[{name!r}] is {value!r}: a tool_map value is a tool class or instance, rLLM's "
        "(rllm.tools.tool_base.Tool, with forward() and json) or rllm's (rllm.tools.Tool, or an @rllm.tools.tool "
        "function)"
    )


def _takes_name(cls: type) -> bool:
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return True
    return "name" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _renamed(tool: Tool, name: str) -> Tool:
    tool.name = name
    return tool


class MultiTool(Tool):
    """Several tools behind one `forward(tool_name=..., **arguments)`."""

    def __init__(self, tools: list[str] | None = None, tool_map: dict[str, Any] | None = None) -> None:
        if tool_map is not None and tools is not None:
            raise ValueError("Cannot specify both 'tools' and 'tool_map' parameters")
        self.name, self.description, self.function = "multi_tool", "The agent's tools.", None
        if tool_map is not None:
            self.tools = list(tool_map)
            self.tool_map = {name: as_rllm_tool(name, value) for name, value in tool_map.items()}
        else:
            self.tools = list(tools or [])
            self.tool_map = {name: _from_registry(name) for name in self.tools}

    @property
    def json(self) -> list[dict[str, Any]]:
        return [tool.json for tool in self.tool_map.values()]

    def forward(self, *args: Any, tool_name: str, **kwargs: Any) -> ToolOutput:
        tool = self.tool_map.get(tool_name)
        if tool is None:
            return self._unknown(tool_name)
        if _async_only(tool):  # rLLM would call its missing forward(): run the coroutine to completion instead
            from rllm.tools.base import run_coroutine

            return run_coroutine(tool.async_forward(*args, **kwargs))
        return tool(*args, **kwargs)

    async def async_forward(self, *args: Any, tool_name: str, **kwargs: Any) -> ToolOutput:
        tool = self.tool_map.get(tool_name)
        if tool is None:
            return self._unknown(tool_name)
        return await tool.async_forward(*args, **kwargs)

    def _unknown(self, tool_name: Any) -> ToolOutput:
        available = ", ".join(self.tool_map) or "none"
        return ToolOutput(name=str(tool_name), error=f"no tool named {tool_name!r}; the tools are: {available}")


def _async_only(tool: Tool) -> bool:
    """Whether `tool` implements `async_forward` only (an MCP tool, say)."""
    cls = type(tool)
    return cls.forward is Tool.forward and cls.async_forward is not Tool.async_forward and tool.function is None


def _from_registry(name: str) -> Tool:
    from rllm.compat.tools.registry import tool_registry

    if name not in tool_registry:
        raise UnknownToolError(
            f"no tool named {name!r} in rllm.tools.tool_registry (it has: {', '.join(tool_registry)}); register "
            "your tool class there, or pass tool_map={name: ToolClass}"
        )
    return as_rllm_tool(name, tool_registry.instantiate(name))

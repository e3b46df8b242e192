"""rLLM v0.2's `MCPTool` (`rllm.tools.mcp_tool`): one tool of an MCP server as an rLLM `Tool` (`json`,
`async_forward`), as `MCPConnectionManager.tool_map` lists them for `MCPToolAgent`.

`MCPTool(session, tool_name, tool_description, tool_schema)`: `session` is what the calls go through: rllm's MCP
connection (`rllm.tools.mcp.MCPConnection`, which the manager passes) or an MCP SDK `ClientSession` of your own
(awaited on the loop that owns it, as in rLLM). `async_forward(**arguments)` returns a `ToolOutput`: the tool's text
as `output`, or `error` when the call failed or the tool reported an error (rLLM passes a tool-reported error on as
`output`; here the model reads "Error: ..."). `forward` (sync) works with rllm's connection; rLLM's has none.
"""

from __future__ import annotations

import logging
from typing import Any

from rllm.compat.tools.tool_base import Tool, ToolOutput
from rllm.errors import RllmError

__all__ = ["MCPTool"]

logger = logging.getLogger(__name__)


class MCPTool(Tool):
    def __init__(self, session: Any, tool_name: str, tool_description: str | None, tool_schema: dict[str, Any]):
        self._tool_schema = tool_schema
        self.session = session
        super().__init__(name=tool_name, description=tool_description or "")

    @property
    def json(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self._tool_schema},
        }

    def forward(self, **kwargs: Any) -> ToolOutput:
        if not hasattr(self.session, "call"):
            raise RllmError(
                f"MCP tool {self.name!r} runs asynchronously on its MCP SDK session: use await tool.async_forward(...)"
            )
        return self._output(self.session.call(self.name, kwargs))

    async def async_forward(self, **kwargs: Any) -> ToolOutput:
        logger.debug("calling MCP tool %s with %s", self.name, kwargs)
        try:
            if hasattr(self.session, "acall"):  # rllm's MCPConnection: never raises for a tool's failure
                return self._output(await self.session.acall(self.name, kwargs))
            return self._sdk_output(await self.session.call_tool(self.name, kwargs))
        except Exception as exc:
            return ToolOutput(name=self.name, error=f"Error calling MCP tool: {exc}")

    def _output(self, result: Any) -> ToolOutput:
        """From rllm's `ToolResult`."""
        if result.is_error:
            return ToolOutput(name=self.name, error=result.content, metadata={"error_kind": result.error_kind})
        return ToolOutput(name=self.name, output=result.content)

    def _sdk_output(self, result: Any) -> ToolOutput:
        """From the SDK's `CallToolResult`: its text blocks, one per line."""
        text = "\n".join(str(getattr(block, "text", block)) for block in getattr(result, "content", None) or [])
        if getattr(result, "is_error", False) or getattr(result, "isError", False):
            return ToolOutput(name=self.name, error=text or "the tool reported an error")
        return ToolOutput(name=self.name, output=text)

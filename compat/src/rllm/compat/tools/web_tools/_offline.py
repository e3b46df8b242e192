"""rLLM's web tools need network access and API keys (Google Custom Search, Firecrawl, Tavily), which rllm does not
use. Their classes stay importable and describe themselves (so prompts and `tool_map`s written for rLLM build), and
running one returns a `ToolOutput` whose `error` names what to use instead (as rLLM's own tools answer when their
service cannot be reached), with a `UserWarning` the first time each tool is run, so the user sees it too."""

from __future__ import annotations

import warnings
from typing import Any

from rllm.compat.tools.tool_base import Tool, ToolOutput

__all__ = ["OfflineWebTool"]

INSTEAD = (
    "rllm does not call web APIs: put your own rLLM Tool subclass (forward() calling your search service) in "
    "tool_map, or search your own documents with rllm.tools.DocumentSearch"
)


class OfflineWebTool(Tool):
    """An rLLM web tool's name and schema, without its service."""

    tool_name = ""
    tool_description = ""
    parameters: dict = {}  # noqa: RUF012 - set by each subclass

    def __init__(self, name: str | None = None, description: str | None = None, **service_options: Any) -> None:
        self.service_options = service_options  # rLLM's timeout, api_key, ...: kept, never used
        super().__init__(name=name or self.tool_name, description=description or self.tool_description)

    def forward(self, *args: Any, **kwargs: Any) -> ToolOutput:
        message = f"rLLM's {type(self).__name__} ({self.name!r}) is not available: {INSTEAD}"
        warnings.warn(message, UserWarning, stacklevel=2)  # shown once per call site by Python's default filter
        return ToolOutput(name=self.name or self.tool_name, error=message)

    async def async_forward(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return self.forward(*args, **kwargs)

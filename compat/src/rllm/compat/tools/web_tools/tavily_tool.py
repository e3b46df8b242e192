"""rLLM v0.2's `TavilyExtractTool` ("tavily-extract") and `TavilySearchTool` ("tavily-search"): importable, raise on
use (see `_offline`)."""

from rllm.compat.tools.web_tools._offline import OfflineWebTool

__all__ = ["TavilyExtractTool", "TavilySearchTool"]


class TavilyExtractTool(OfflineWebTool):
    tool_name = "tavily-extract"
    tool_description = "Extract the text of web pages."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"urls": {"type": "array", "items": {"type": "string"}, "description": "The pages' URLs."}},
        "required": ["urls"],
    }


class TavilySearchTool(OfflineWebTool):
    tool_name = "tavily-search"
    tool_description = "Search the web with Tavily and return the top results."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for."},
            "max_results": {"type": "integer", "description": "How many results to return.", "default": 5},
        },
        "required": ["query"],
    }

"""rLLM v0.2's `GoogleSearchTool` ("google_search"): importable, raises on use (see `_offline`)."""

from rllm.compat.tools.web_tools._offline import OfflineWebTool

__all__ = ["GoogleSearchTool"]


class GoogleSearchTool(OfflineWebTool):
    tool_name = "google_search"
    tool_description = "Search the web with Google and return the top results."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to search for."}},
        "required": ["query"],
    }

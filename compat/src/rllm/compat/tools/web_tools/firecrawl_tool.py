"""rLLM v0.2's `FirecrawlTool` ("firecrawl"): importable, raises on use (see `_offline`)."""

from rllm.compat.tools.web_tools._offline import OfflineWebTool

__all__ = ["FirecrawlTool"]


class FirecrawlTool(OfflineWebTool):
    tool_name = "firecrawl"
    tool_description = "Fetch a web page and return its text."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"url": {"type": "string", "description": "The page's URL."}},
        "required": ["url"],
    }

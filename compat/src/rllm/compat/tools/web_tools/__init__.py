"""rLLM v0.2's web tools. They need network access and API keys, which rllm does not use: each imports and describes
itself, and when run answers with an error (and a warning) naming what to use instead."""

from rllm.compat.tools.web_tools.firecrawl_tool import FirecrawlTool
from rllm.compat.tools.web_tools.gsearch_tool import GoogleSearchTool
from rllm.compat.tools.web_tools.tavily_tool import TavilyExtractTool, TavilySearchTool

__all__ = ["FirecrawlTool", "GoogleSearchTool", "TavilyExtractTool", "TavilySearchTool"]

"""rLLM v0.2's `MCPToolAgent` (imported as `rllm.agents.tool_agent.MCPToolAgent`): rLLM's `ToolAgent` over the tools
of an MCP server, the agent side of `rllm.environments.tools.mcp_env.MCPEnvironment`:

    manager = MCPConnectionManager("npx", ["-y", "tavily-mcp@0.2.4"], {"TAVILY_API_KEY": key})
    manager.start()
    agent_args = {"parser_name": "qwen", "system_prompt": SEARCH_SYSTEM_PROMPT, "tool_map": manager.tool_map}
    manager.stop()                                   # the agent only needs the tools' schemas

`MCPToolAgent(system_prompt=TOOL_SYSTEM_PROMPT, parser_name="qwen", tool_map=...)`: `tool_map` maps names to rLLM
`MCPTool`s (or other rLLM tools); they become the agent's `tools` (a `MultiTool`), whose `json` schemas go into the
system prompt through the tool parser's `get_tool_prompt`, as rLLM does. Everything else (parsing the reply's tool
calls, a reply without calls becoming a "finish" call, the observations `{"question"}` / `{"tool_outputs"}`) is
`ToolAgent`'s. The agent never calls the tools: the environment does.

Differences from rLLM: a tool listed under two names (rLLM's manager lists "tavily-search" also as
"tavily_search", with the same schema) is shown once in the prompt (rLLM shows it twice); `tool_map` may be left
out (no tools; in rLLM it is required).
"""

from __future__ import annotations

from typing import Any

from rllm.compat.agents.tool_agent import TOOL_SYSTEM_PROMPT, ToolAgent

__all__ = ["MCPToolAgent"]


class MCPToolAgent(ToolAgent):
    def __init__(
        self, system_prompt: str = TOOL_SYSTEM_PROMPT, parser_name: str = "qwen", tool_map: dict[str, Any] | None = None
    ) -> None:
        self.tool_map = dict(tool_map or {})
        super().__init__(system_prompt=system_prompt, parser_name=parser_name, tool_map=_distinct(self.tool_map))


def _distinct(tool_map: dict[str, Any]) -> dict[str, Any]:
    """`tool_map` without the entries whose schema an earlier entry already has (a tool listed under an alias)."""
    seen: list[Any] = []
    distinct = {}
    for name, tool in tool_map.items():
        schema = None if isinstance(tool, type) else getattr(tool, "json", None)
        if isinstance(schema, dict):  # a tool instance; classes are kept as they are
            if schema in seen:
                continue
            seen.append(schema)
        distinct[name] = tool
    return distinct

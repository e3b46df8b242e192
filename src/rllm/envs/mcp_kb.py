"""`MCPKnowledgeBaseEnv`: the `mcp_kb` task's env: questions about fictional facts that need the tools of the example
MCP server (`rllm.data.mcp_kb`, started over stdio for each episode and closed after it)."""

from __future__ import annotations

from rllm.data.mcp_kb import mcp_kb_reward, mcp_kb_server_spec
from rllm.envs.tool import MCPEnvironment

__all__ = ["MCPKnowledgeBaseEnv"]


class MCPKnowledgeBaseEnv(MCPEnvironment):
    reward_fn = staticmethod(mcp_kb_reward)

    def server_spec(self):
        return mcp_kb_server_spec()

"""`langgraph`: LangChain's prebuilt ReAct agent (`langchain.agents.create_agent`, a LangGraph graph; the successor of
`langgraph.prebuilt.create_react_agent`) over `langchain_openai.ChatOpenAI`, with the task's tools. The answer is the
text of the graph's last message. `agent_args.instructions` is its system prompt; `agent_args: {api: responses}`
makes ChatOpenAI use the Responses API (`use_responses_api=True`) instead of chat completions.

The turn limit is LangGraph's recursion limit: one model call and one tool round are a super-step each, so
`job.max_turns` model calls are `2 * max_turns` super-steps; past it (`GraphRecursionError`) the episode ends as
`max_turns`.
"""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError

from rllm.harnesses.base import HarnessError, HarnessJob, turn_limit

__all__ = ["langgraph"]


async def langgraph(job: HarnessJob) -> str:
    api = job.args.get("api", "chat_completions")
    if api not in ("chat_completions", "responses"):
        raise HarnessError(f"agent_args.api={api!r}: the langgraph harness takes chat_completions or responses")
    model = ChatOpenAI(
        base_url=job.base_url, api_key="none", model=job.model, max_retries=0, use_responses_api=api == "responses"
    )
    tools = [_structured_tool(job, schema["function"]) for schema in job.schemas()]
    graph = create_agent(model, tools, system_prompt=job.instructions)
    try:
        state = await graph.ainvoke(
            {"messages": [{"role": "user", "content": job.instruction}]},
            config={"recursion_limit": 2 * job.max_turns},
        )
    except GraphRecursionError:
        raise turn_limit(job, "langgraph") from None
    return state["messages"][-1].text


def _structured_tool(job: HarnessJob, function: dict) -> StructuredTool:
    """One of the job's tools as a LangChain tool (its JSON schema as written); calls run through the job."""
    name = function["name"]

    async def invoke(**arguments: object) -> str:
        return await job.run_tool(name, arguments)

    return StructuredTool.from_function(
        coroutine=invoke, name=name, description=function.get("description") or name, args_schema=function["parameters"]
    )

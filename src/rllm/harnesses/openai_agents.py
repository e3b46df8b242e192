"""`openai-agents`: an OpenAI Agents SDK `Agent` (the `openai-agents` package) with the task's tools, run by its own
`Runner`. The model is the SDK's default kind, its Responses model (`/v1/responses`); `agent_args: {api:
chat_completions}` takes its chat-completions model instead. `agent_args.instructions` is the agent's
instructions.

Each episode builds its own `AsyncOpenAI` client and hands it to the model object, never to the SDK's process-wide
default (`set_default_openai_client`): concurrent episodes of one process would share that one and send their calls
to one session. Tracing is off (it would post every run to OpenAI's servers). The SDK's own turn limit is
`job.max_turns`; past it (`MaxTurnsExceeded`) the episode ends as `max_turns`.
"""

from __future__ import annotations

import agents
import openai

from rllm.harnesses.base import HarnessError, HarnessJob, turn_limit

__all__ = ["openai_agents"]

_MODELS = {"responses": agents.OpenAIResponsesModel, "chat_completions": agents.OpenAIChatCompletionsModel}


async def openai_agents(job: HarnessJob) -> str:
    api = job.args.get("api", "responses")
    if api not in _MODELS:
        raise HarnessError(f"agent_args.api={api!r}: the openai-agents harness takes one of {sorted(_MODELS)}")
    async with openai.AsyncOpenAI(base_url=job.base_url, api_key="none", max_retries=0) as client:
        agent = agents.Agent(
            name="agent",
            instructions=job.instructions,
            tools=[_function_tool(job, schema["function"]) for schema in job.schemas()],
            model=_MODELS[api](job.model, client),
        )
        config = agents.RunConfig(tracing_disabled=True)
        try:
            result = await agents.Runner.run(agent, job.instruction, max_turns=job.max_turns, run_config=config)
        except agents.MaxTurnsExceeded:
            raise turn_limit(job, "openai-agents") from None
    return str(result.final_output)


def _function_tool(job: HarnessJob, function: dict) -> agents.FunctionTool:
    """One of the job's tools as the SDK's function tool; its calls run through the job (`HarnessJob.run_tool`)."""
    name = function["name"]

    async def invoke(context: object, arguments: str) -> str:
        return await job.run_tool(name, arguments)

    return agents.FunctionTool(
        name=name,
        description=function.get("description") or "",
        params_json_schema=function["parameters"],
        on_invoke_tool=invoke,
        strict_json_schema=False,  # the tools' own schemas, as written: rllm checks the arguments itself
    )

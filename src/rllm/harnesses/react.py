"""`react`: the plain `openai` SDK in a ReAct loop. Send the conversation with the tools; when the reply asks for
tools, run them and send their results back; the first reply that asks for none is the answer. Without tools it is
one call. At most `job.max_turns` calls: a reply that still asks for tools at the last one ends the episode as
`max_turns` (`rllm.harnesses.base.turn_limit`)."""

from __future__ import annotations

import openai

from rllm.harnesses.base import HarnessJob, turn_limit

__all__ = ["react"]


async def react(job: HarnessJob) -> str:
    messages: list[dict] = [{"role": "user", "content": job.instruction}]
    if job.instructions:
        messages.insert(0, {"role": "system", "content": job.instructions})
    tools = job.schemas() or openai.NOT_GIVEN
    async with openai.AsyncOpenAI(base_url=job.base_url, api_key="none", max_retries=0) as client:
        for _ in range(job.max_turns):
            reply = await client.chat.completions.create(model=job.model, messages=messages, tools=tools)
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = await job.run_tool(call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise turn_limit(job, "react")

"""`anthropic`: the `anthropic` SDK's tool loop over the Messages API (`/v1/messages`). Send the conversation with
the tools; while the reply stops for `tool_use`, run the tools and send their `tool_result` blocks back; the text of
the first reply that does not is the answer. `agent_args.instructions` is the `system` prompt; `agent_args.max_tokens`
the per-call `max_tokens` the API requires (default 1024; the trainer's `rollout.max_tokens` still bounds it)."""

from __future__ import annotations

import anthropic

from rllm.harnesses.base import HarnessJob, turn_limit

__all__ = ["anthropic_loop"]


async def anthropic_loop(job: HarnessJob) -> str:
    # the SDK appends /v1/messages to its base URL; the session URL already ends in /v1
    base_url = job.base_url.removesuffix("/v1")
    tools = [_tool(schema["function"]) for schema in job.schemas()]
    extra = {"system": job.instructions} if job.instructions else {}
    if tools:
        extra["tools"] = tools
    messages: list[dict] = [{"role": "user", "content": job.instruction}]
    async with anthropic.AsyncAnthropic(base_url=base_url, api_key="none", max_retries=0) as client:
        for _ in range(job.max_turns):
            reply = await client.messages.create(
                model=job.model, max_tokens=int(job.args.get("max_tokens", 1024)), messages=messages, **extra
            )
            uses = [block for block in reply.content if block.type == "tool_use"]
            if reply.stop_reason != "tool_use" or not uses:
                return "".join(block.text for block in reply.content if block.type == "text")
            messages.append({"role": "assistant", "content": [block.model_dump() for block in reply.content]})
            results = [
                {"type": "tool_result", "tool_use_id": use.id, "content": await job.run_tool(use.name, use.input)}
                for use in uses
            ]
            messages.append({"role": "user", "content": results})
    raise turn_limit(job, "anthropic")


def _tool(function: dict) -> dict:
    return {
        "name": function["name"],
        "description": function.get("description") or "",
        "input_schema": function["parameters"],
    }

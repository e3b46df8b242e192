"""`bash`: a ReAct loop in the task's workspace. The plain `openai` SDK's chat completions with one tool, `bash`
(`{"command": ...}`); each call runs through `job.workspace.run_command` (the `swe` task: a fresh shell in /testbed,
in rllm's sandbox, no network, nothing writable but the repository and a scratch /tmp) and its output goes back as
the tool's result. The first reply that calls no tool ends the episode; its text is the answer, and the task grades
what the commands left. At most `job.max_turns` calls: a reply that still calls a tool at the last one ends the
episode as `max_turns` (`rllm.harnesses.base.turn_limit`). `agent_args.instructions` replaces the system prompt.
"""

from __future__ import annotations

import json

import openai

from rllm.harnesses.base import HarnessJob, turn_limit

__all__ = ["BASH_TOOL", "SYSTEM_PROMPT", "bash"]

# The task's own instruction may name a way to finish that only its native scaffold has (SWE's "finish tool"):
# the system prompt says how this loop ends.
SYSTEM_PROMPT = (
    "You work in a Linux shell. Call the bash tool to run a command; each call runs in a fresh shell in the working "
    "directory, and you see its output. When the task is done, reply with a short summary and no tool call: that "
    "ends your work."
)
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the working directory and return its output (stdout and stderr).",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command."}},
            "required": ["command"],
        },
    },
}


def bash(job: HarnessJob) -> str:
    messages: list[dict] = [
        {"role": "system", "content": job.instructions or SYSTEM_PROMPT},
        {"role": "user", "content": job.instruction},
    ]
    # synchronous on purpose: the harness runs on its own worker thread, and run_command blocks
    with openai.OpenAI(base_url=job.base_url, api_key="none", max_retries=0) as client:
        for _ in range(job.max_turns):
            reply = client.chat.completions.create(model=job.model, messages=messages, tools=[BASH_TOOL])
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": _run_call(job, call)})
    raise turn_limit(job, "bash")


def _run_call(job: HarnessJob, call: object) -> str:
    """One tool call's result: the command's output, or what was wrong with the call (told, never raised)."""
    function = call.function
    if function.name != "bash":
        return f"Error: there is no tool {function.name!r}; the one tool is bash"
    try:
        arguments = json.loads(function.arguments or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict) or not isinstance(arguments.get("command"), str):
        return 'Error: call bash with {"command": "<a bash command>"}'
    return job.workspace.run_command(arguments["command"])

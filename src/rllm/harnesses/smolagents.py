"""`smolagents`: a smolagents `ToolCallingAgent` over its `OpenAIServerModel` (chat completions), with the task's
tools. The agent ends a run by calling its own `final_answer` tool; that answer, as text, is the episode's answer.
`agent_args.instructions` is the agent's custom instructions (smolagents adds them to its own system prompt).

Tools: each job tool becomes a `smolagents.Tool` built from its JSON schema (the properties as smolagents' `inputs`,
the optional ones nullable); its calls run through the job (`HarnessJob.run_tool`), so rllm checks the arguments
and turns failures into text. smolagents tools are synchronous: the call is awaited with `run_coroutine`.

Turn limit: `max_steps=job.max_turns`. An agent still without an answer after its last step ends the episode as
`max_turns`. smolagents would then make one more model call (a summary asked for as the answer, past the limit and
not a real answer); the harness stops the run before it, by reading the run's steps as they happen (`stream=True`).

smolagents replays a tool-calling turn as text ("Calling tools:\\n[{'id': ...}]") instead of `tool_calls`; the
gateway recognises such a turn by its call ids (`rllm.gateway.session`), so the episode stays one token-exact row.
"""

from __future__ import annotations

import contextlib
from typing import Any

import smolagents

from rllm.harnesses.base import HarnessJob, turn_limit
from rllm.tools.base import run_coroutine

__all__ = ["smolagents_agent"]


def smolagents_agent(job: HarnessJob) -> str:
    model = smolagents.OpenAIServerModel(
        model_id=job.model,
        api_base=job.base_url,
        api_key="none",
        client_kwargs={"max_retries": 0},
        retry=False,  # rllm decides what a failed call means (the rollout re-raises the session's failure)
    )
    agent = smolagents.ToolCallingAgent(
        tools=[_JobTool(job, schema["function"]) for schema in job.schemas()],
        model=model,
        max_steps=job.max_turns,
        instructions=job.instructions,
        verbosity_level=smolagents.LogLevel.OFF,  # it would print rich panels of every step to the console
    )
    with contextlib.closing(agent.run(job.instruction, stream=True)) as steps:
        for step in steps:
            if isinstance(step, smolagents.FinalAnswerStep):
                return str(step.output)
            if _last_step_without_answer(step, job.max_turns):
                raise turn_limit(job, "smolagents")
    raise RuntimeError("the smolagents run ended without a final answer step")  # smolagents always yields one


def _last_step_without_answer(step: Any, max_turns: int) -> bool:
    """The step at the turn limit, which sampled a reply (a step whose model call failed has none: that failure is
    raised by the run next) and did not answer."""
    return (
        isinstance(step, smolagents.ActionStep)
        and step.step_number >= max_turns
        and step.model_output_message is not None
        and not step.is_final_answer
    )


class _JobTool(smolagents.Tool):
    """One of the job's tools as a smolagents tool; its calls run through the job."""

    # `forward` takes the arguments as keywords, whatever the tool's inputs: smolagents checks a tool's `forward`
    # signature against its inputs unless told not to
    skip_forward_signature_validation = True
    output_type = "string"

    def __init__(self, job: HarnessJob, function: dict) -> None:
        super().__init__()
        self.job = job
        self.name = function["name"]
        self.description = function.get("description") or self.name
        self.inputs = _inputs(function.get("parameters") or {})

    def forward(self, **arguments: Any) -> str:
        return run_coroutine(self.job.run_tool(self.name, arguments))


# the JSON-schema types smolagents accepts in `inputs` (`smolagents.tools.AUTHORIZED_TYPES` less image, audio and
# null: a type that admits null is an optional argument, `nullable`)
_TYPES = {"string", "boolean", "integer", "number", "array", "object"}


def _inputs(parameters: dict) -> dict[str, dict]:
    """A JSON schema's properties as smolagents `inputs`: each needs a `type` smolagents knows (`any` when the schema
    gives none it knows) and a `description`; a property that is not required is `nullable`, which is how smolagents
    marks an argument optional."""
    required = set(parameters.get("required") or [])
    inputs = {}
    for name, schema in (parameters.get("properties") or {}).items():
        entry = dict(schema) | {"type": _input_type(schema.get("type")), "description": schema.get("description", "")}
        if name not in required or "null" in _as_list(schema.get("type")):
            entry["nullable"] = True
        inputs[name] = entry
    return inputs


def _input_type(json_type: Any) -> str | list[str]:
    known = [kind for kind in _as_list(json_type) if kind in _TYPES]
    if not known:
        return "any"
    return known[0] if len(known) == 1 else known


def _as_list(json_type: Any) -> list:
    if isinstance(json_type, list):
        return json_type
    return [] if json_type is None else [json_type]

"""rLLM v0.2's SDK data processing: recorded calls -> rllm's training types (`rllm.types.Step`, `Trajectory`,
`ModelOutput`), with the exact token ids the gateway recorded.

rLLM's names: `build_llm_io`, `build_llm_output` (an OpenAI response dict -> `LLMInput`/`LLMOutput`),
`trace_to_model_output`, `trace_to_step`, `group_steps`. rllm's additions, for views a user scored:
`step_view_to_step` and `trajectory_view_to_trajectory` (a `TrajectoryView` with its step rewards and reward ->
a `Trajectory` that rllm's batching turns into token-exact training rows).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

from rllm.compat.sdk.protocol import LLMInput, LLMOutput, StepView, Trace, TrajectoryView
from rllm.types import ModelOutput, Step, ToolCall, Trajectory

__all__ = [
    "build_llm_io",
    "build_llm_output",
    "group_steps",
    "step_view_to_step",
    "trace_to_model_output",
    "trace_to_step",
    "trajectory_view_to_trajectory",
]


def build_llm_output(payload: dict) -> LLMOutput:
    """An OpenAI chat-completion dict -> `LLMOutput` (vLLM's `provider_specific_fields.token_ids` when present)."""
    if not isinstance(payload, dict):
        raise TypeError(f"LLM output must be dict or LLMOutput, got {type(payload)}")
    choices = payload.get("choices") or []
    if not choices:
        raise ValueError("LLM output payload missing 'choices'")
    choice = choices[0]
    extra = choice.get("provider_specific_fields") or {}
    logprobs = extra.get("response_logprobs")
    if logprobs is None and isinstance(choice.get("logprobs"), dict):
        logprobs = [entry["logprob"] for entry in choice["logprobs"].get("content") or [] if entry]
    return LLMOutput(
        message=choice.get("message") or {},
        finish_reason=choice.get("finish_reason"),
        output_token_ids=list(extra.get("token_ids") or []),
        rollout_logprobs=list(logprobs or []),
    )


def build_llm_io(input_payload: dict, output_payload: dict) -> tuple[LLMInput, LLMOutput]:
    prompt_ids = list(output_payload.get("prompt_token_ids") or [])
    return LLMInput(messages=input_payload.get("messages") or [], prompt_token_ids=prompt_ids), build_llm_output(
        output_payload
    )


def trace_to_model_output(trace: Trace) -> ModelOutput:
    """The call as rllm's `ModelOutput`; a trace without token ids (not recorded through a gateway) cannot train."""
    return _model_output(trace.input.model_dump(), trace.output.model_dump())


def trace_to_step(trace: Trace) -> Step:
    """rLLM's step of a call: `chat_completions` = the messages sent + the reply, `info` = the trace's metadata."""
    reply = trace.output.message
    if not reply:
        raise ValueError("Response message is required in trace output")
    return Step(
        chat_completions=[*trace.input.messages, reply],
        model_output=trace_to_model_output(trace),
        info=dict(trace.metadata),
    )


def group_steps(steps: list[Step], by: str | None = None, name_key: str | None = None) -> list[Trajectory]:
    """Steps grouped into trajectories by `step.info[by]` (a step without it gets its own); `name_key` names each
    trajectory from its first step's info. `by=None`: one trajectory "agent"."""
    if by is None:
        return [Trajectory(name="agent", steps=steps)]
    groups: dict[str, list[Step]] = defaultdict(list)
    for step in steps:
        groups[step.info.get(by, str(uuid.uuid4()))].append(step)
    return [
        Trajectory(name=group[0].info.get(name_key, "agent") if name_key else "agent", steps=group)
        for group in groups.values()
    ]


def step_view_to_step(view: StepView) -> Step:
    """A scored `StepView` -> rllm's `Step` (reward, action and metadata kept)."""
    given, returned = dict(view.input or {}), dict(view.output or {})
    reply = returned.get("message") or {}
    return Step(
        chat_completions=[*(given.get("messages") or []), *([reply] if reply else [])],
        model_output=_model_output(given, returned),
        action=view.action,
        reward=view.reward,
        info=dict(view.metadata or {}),
    )


def trajectory_view_to_trajectory(view: TrajectoryView) -> Trajectory:
    """A scored `TrajectoryView` -> rllm's `Trajectory` (its name, steps and reward)."""
    return Trajectory(
        name=view.name,
        steps=[step_view_to_step(step) for step in view.steps],
        reward=view.reward,
        info=dict(view.metadata or {}),
    )


def _model_output(given: dict, returned: dict) -> ModelOutput:
    reply = returned.get("message") or {}
    calls = [_tool_call(call) for call in reply.get("tool_calls") or []]
    return ModelOutput(
        text=reply.get("content") or "",
        content=reply.get("content"),
        reasoning=reply.get("reasoning"),
        tool_calls=calls,
        prompt_ids=list(given.get("prompt_token_ids") or []) or None,
        completion_ids=list(returned.get("output_token_ids") or []) or None,
        logprobs=list(returned.get("rollout_logprobs") or []) or None,
        finish_reason=returned.get("finish_reason"),
    )


def _tool_call(call: Any) -> ToolCall:
    function = call.get("function") or {}
    return ToolCall(
        id=call.get("id"),
        name=function.get("name") or "",
        arguments=ToolCall.decode_arguments(function.get("arguments") or {}),
    )

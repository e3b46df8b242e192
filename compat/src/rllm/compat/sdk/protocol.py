"""rLLM v0.2's SDK data: `Trace` (one recorded LLM call), `StepView` (a trace with a reward and an action, what a
session's `steps` and `@trajectory` give back) and `TrajectoryView` (named steps with a reward). The fields are
rLLM's. Through rllm's gateway a trace carries the exact token ids: `input.prompt_token_ids`,
`output.output_token_ids` and `output.rollout_logprobs` (empty lists when the server could not give them).
`rllm.sdk.data_process` turns them into rllm's `Step`/`Trajectory` for training."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["LLMInput", "LLMOutput", "StepView", "Trace", "TrajectoryView", "trace_to_step_view"]


class LLMInput(BaseModel):
    messages: list[dict]
    prompt_token_ids: list[int] = Field(default_factory=list)


class LLMOutput(BaseModel):
    message: dict
    finish_reason: str | None = None
    output_token_ids: list[int] = Field(default_factory=list)
    rollout_logprobs: list[float] | None = None


class Trace(BaseModel):
    """One LLM call as a session recorded it: the request's messages and the reply, with token ids when known."""

    trace_id: str
    session_name: str
    name: str
    input: LLMInput
    output: LLMOutput
    model: str
    latency_ms: float
    tokens: dict[str, int]
    metadata: dict = Field(default_factory=dict)
    timestamp: float
    parent_trace_id: str | None = None
    cost: float | None = None
    environment: str | None = None
    tools: list[dict] | None = None
    contexts: list[str | dict] | None = None
    tags: list[str] | None = None


class StepView(BaseModel):
    """One LLM call with the reward and action the user gives it. `id` is the trace id; `input`/`output` are the
    trace's `LLMInput`/`LLMOutput` as dicts."""

    id: str
    input: Any | None = None
    output: Any | None = None
    action: Any | None = None
    reward: float = 0.0
    metadata: dict | None = None


class TrajectoryView(BaseModel):
    """Named steps (one per LLM call) with a reward; `@trajectory` fills `input` (the function's arguments) and
    `output` (what it returned)."""

    name: str = "agent"
    steps: list[StepView] = Field(default_factory=list)
    reward: float = 0.0
    input: dict | None = None
    output: Any = None
    metadata: dict | None = None

    @property
    def result(self) -> Any:
        """`output` (rLLM's older name)."""
        return self.output


def trace_to_step_view(trace: Trace) -> StepView:
    return StepView(
        id=trace.trace_id,
        input=trace.input.model_dump(),
        output=trace.output.model_dump(),
        reward=0.0,
        metadata=trace.metadata,
    )

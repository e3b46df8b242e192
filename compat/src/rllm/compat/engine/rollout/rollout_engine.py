"""rLLM v0.2's rollout-engine interface: `await rollout_engine.get_model_response(messages, **kwargs) -> ModelOutput`,
the call rLLM workflows make (`from rllm.engine import ModelOutput, RolloutEngine`).

`ModelOutput` is rllm's own (`rllm.types.ModelOutput`): text, content, reasoning, tool_calls, prompt_ids,
completion_ids, logprobs, finish_reason, and `prompt_length`/`completion_length` as properties.

`ClientRolloutEngine` puts an rllm model client behind that call. Inside a workflow run by an engine it is the
workflow's own `generate`: the prompt renders so that it extends the conversation's previous turn, the length
budget and the seeds are the engine's, and the exact sampled ids and logprobs are recorded. Calls with the same
`application_id` are one conversation (rLLM's built-in workflows pass the episode uid: their turns train as one row);
a call without one is a conversation of its own (rLLM's solver-judge calls the model concurrently with none).
Outside a workflow it renders the messages and calls the client directly.
"""

from __future__ import annotations

import contextvars
from typing import Any

from rllm.models.base import SamplingParams
from rllm.models.chat import render_messages
from rllm.types import ModelOutput

__all__ = ["ClientRolloutEngine", "ModelOutput", "RolloutEngine", "current_workflow"]

# The rLLM-style workflow whose `run` is executing in this task (and the tasks it spawns): set by
# `rllm.workflows.workflow.Workflow` around each episode.
_CURRENT_WORKFLOW: contextvars.ContextVar[Any] = contextvars.ContextVar("rllm_v02_workflow", default=None)

# get_model_response keywords rLLM's engines consume themselves; here they change nothing.
_IGNORED = (
    "application_id",
    "validate",
    "enforce_max_prompt_length",
    "accumulate_reasoning",
    "skip_special_tokens",
    "model",
)
_SAMPLING = {"temperature", "top_p", "top_k", "seed", "stop", "max_tokens"}
_MAX_TOKENS_NAMES = ("max_tokens", "max_new_tokens", "max_completion_tokens")


def current_workflow() -> Any:
    return _CURRENT_WORKFLOW.get()


class RolloutEngine:
    """rLLM's base class: subclasses answer `get_model_response`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def get_model_response(self, messages: list[dict], **kwargs: Any) -> ModelOutput:
        raise NotImplementedError(f"{type(self).__name__} must implement get_model_response")

    async def wake_up(self) -> None:
        pass

    async def sleep(self) -> None:
        pass


class ClientRolloutEngine(RolloutEngine):
    """`get_model_response` over an rllm `ModelClient` (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        *,
        sampling_params: dict[str, Any] | None = None,
        max_prompt_length: int = 4096,
        max_response_length: int = 4096,
        tools: list[dict] | None = None,
    ) -> None:
        self.client = client
        self.tokenizer = getattr(client, "tokenizer", None)
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self.tools = tools
        self.sampling = SamplingParams(**{"max_tokens": max_response_length, **_sampling_overrides(sampling_params)})

    async def get_model_response(self, messages: list[dict], **kwargs: Any) -> ModelOutput:
        conversation = kwargs.get("application_id")
        tools = kwargs.pop("tools", None) or self.tools
        overrides = _sampling_overrides({k: v for k, v in kwargs.items() if k not in _IGNORED})
        workflow = current_workflow()
        if workflow is not None:
            return await workflow.generate(
                messages, conversation=workflow.conversation_for(conversation), tools=tools, **overrides
            )
        if self.client is None:
            raise RuntimeError(
                "this workflow's rollout engine serves only inside an episode run by an engine or the "
                "trainer; to call a server directly, give the workflow an OpenAIEngine"
            )
        sampling = self.sampling.model_copy(update={**overrides, "tools": tools})
        prompt = messages if self.tokenizer is None else render_messages(self.tokenizer, messages, tools=tools)
        return await self.client.generate(prompt, sampling)


def _sampling_overrides(given: dict[str, Any] | None) -> dict[str, Any]:
    values = dict(given or {})
    values.pop("model", None)  # rLLM drops it too: the engine's model is used
    for name in _MAX_TOKENS_NAMES[1:]:
        if name in values:
            values["max_tokens"] = values.pop(name)
    unknown = sorted(set(values) - _SAMPLING)
    if unknown:
        raise TypeError(
            f"get_model_response/sampling_params: {unknown} not supported (rllm takes "
            f"{sorted(_SAMPLING)}, and max_new_tokens/max_completion_tokens for max_tokens)"
        )
    if isinstance(values.get("stop"), str):
        values["stop"] = [values["stop"]]
    return values

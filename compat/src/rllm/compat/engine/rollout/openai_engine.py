"""rLLM v0.2's `OpenAIEngine` (`from rllm.engine import OpenAIEngine`): a rollout engine on an OpenAI-compatible
server, here `rllm.models.OpenAIClient` behind `ClientRolloutEngine`.

With `tokenizer` the prompt is rendered by the tokenizer's chat template and sent as token ids to `/v1/completions`,
and the ids and logprobs the server sampled come back exactly (rLLM re-tokenizes the returned text and has no
logprobs); without one it uses chat completions (text only: evaluation, not training)."""

from __future__ import annotations

import os
from typing import Any

from rllm.compat.engine.rollout.rollout_engine import ClientRolloutEngine

__all__ = ["OpenAIEngine"]


class OpenAIEngine(ClientRolloutEngine):
    def __init__(
        self,
        model: str = "",
        tokenizer: Any = None,
        max_prompt_length: int = 4096,
        max_response_length: int = 4096,
        max_model_length: int | None = None,
        api_retries: int = 3,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        sampling_params: dict[str, Any] | None = None,
        tools: list[dict] | None = None,
        accumulate_reasoning: bool = False,
        **unknown: Any,
    ) -> None:
        from rllm.models.openai import OpenAIClient

        if unknown:
            raise TypeError(f"OpenAIEngine() got arguments rllm does not support: {sorted(unknown)}")
        if accumulate_reasoning:
            raise ValueError(
                "accumulate_reasoning=True is not supported: the chat template decides how earlier "
                "reasoning renders (rllm counts every turn it cannot extend)"
            )
        client = OpenAIClient(
            base_url,
            model,
            api_key=api_key or os.environ.get("OPENAI_API_KEY"),
            tokenizer=tokenizer,
            max_retries=api_retries,
            allow_missing_token_ids=tokenizer is None,
        )
        super().__init__(
            client,
            sampling_params=sampling_params,
            max_prompt_length=max_prompt_length,
            max_response_length=max_response_length,
            tools=tools,
        )
        self.model = model
        self.max_model_length = max_model_length or max_prompt_length + max_response_length - 1

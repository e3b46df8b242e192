"""The one async protocol every inference client speaks, and the sampling parameters it takes.

`generate(prompt, sampling)` takes either token ids (token-in/token-out, the mode training needs) or chat messages
(for clients without a tokenizer) and returns a `ModelOutput`. Clients that have a tokenizer expose it as
`.tokenizer`, so the engine can render multi-turn prompts as deltas (see `rllm.models.chat`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from rllm.types import ModelOutput

__all__ = ["ImagePrompt", "ModelClient", "Prompt", "SamplingParams", "close_model"]


@dataclass(frozen=True)
class ImagePrompt:
    """Token ids whose image placeholder tokens stand for `images` (data URLs, in the order of their placeholder
    runs): what a vision-language model's conversation renders (`rllm.models.vision`). Only a client with a vision
    processor takes it: `LocalModel` of a VLM samples from the ids and images; `OpenAIClient` sends `messages` (the
    chat messages the ids render, which a conversation attaches), since an OpenAI-compatible server takes images in
    chat messages only, and checks the server's prompt ids against `ids`."""

    ids: list[int]
    images: list[str]
    messages: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.ids)


# Token ids, OpenAI-style chat messages, or token ids with images.
Prompt = list[int] | list[dict[str, Any]] | ImagePrompt


class SamplingParams(BaseModel):
    """How to sample one completion. Defaults follow vLLM/OpenAI: plain sampling at temperature 1."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, ge=0.0, description="0 means greedy decoding.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens; 0 disables.")
    max_tokens: int = Field(256, ge=1, description="Most new tokens to sample.")
    stop: list[str] = Field(default_factory=list, description="Stop strings; the stop string is kept in the output.")
    seed: int | None = Field(None, description="Per-request seed; same seed and prompt give the same sample.")
    # Not sampling, but it travels with every request the same way: the tools (OpenAI function schemas) offered to
    # the model. A client that renders messages itself passes them to the chat template; a chat-mode client sends
    # them to the server, which renders them and parses the calls. A prompt of token ids already holds them.
    tools: list[dict] | None = Field(None, description="Tool schemas offered to the model (chat template tools=).")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@runtime_checkable
class ModelClient(Protocol):
    """What the engines need from a model. `tokenizer` is a transformers tokenizer or None."""

    tokenizer: Any

    async def generate(self, prompt: Prompt, sampling: SamplingParams | None = None) -> ModelOutput: ...


async def close_model(model: Any) -> None:
    """Release what a client holds, whichever it has: its HTTP session (`aclose`), then its worker or the server it
    started (`close`)."""
    if hasattr(model, "aclose"):
        await model.aclose()
    if hasattr(model, "close"):
        model.close()

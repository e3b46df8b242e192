"""Inference clients. All speak `ModelClient.generate(prompt, sampling) -> ModelOutput`; heavy ones load lazily."""

from __future__ import annotations

import importlib
from typing import Any

from rllm.models.base import ModelClient, Prompt, SamplingParams

_LAZY = {
    "ChatRenderer": "rllm.models.chat",
    "FakeModel": "rllm.models.fake",
    "LocalModel": "rllm.models.local",
    "OpenAIClient": "rllm.models.openai",
}

__all__ = ["ChatRenderer", "FakeModel", "LocalModel", "ModelClient", "OpenAIClient", "Prompt", "SamplingParams"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

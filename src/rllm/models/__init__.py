"""Inference clients. All speak `ModelClient.generate(prompt, sampling) -> ModelOutput`; heavy ones load lazily.

The embedded engine, `LocalModel`, is a package of its own above this one: `rllm.inference`."""

from __future__ import annotations

import importlib
from typing import Any

from rllm.models.base import ModelClient, Prompt, SamplingParams

_LAZY = {
    "ChatRenderer": "rllm.models.chat",
    "FakeModel": "rllm.models.fake",
    "OpenAIClient": "rllm.models.openai",
}

__all__ = ["ChatRenderer", "FakeModel", "ModelClient", "OpenAIClient", "Prompt", "SamplingParams"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

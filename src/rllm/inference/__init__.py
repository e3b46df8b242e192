"""The embedded inference engine: `LocalModel` (transformers on CPU or one GPU, continuous batching) and its
settings, `InferenceOptions`.

Its internals, each a module: the decode loop (`scheduler`), the K/V cache and prefix store (`cache`), the state of
each running row (`rows`), CUDA graphs of decode steps (`graphs`), sampling and log-probs (`sampling`), the output
layer on the rows that need it (`lm_head`), the packed oneDNN linear layers (`packed_linears`, which the torch
training backend shares) and the choice, measured per machine, of which linear shapes run packed (`kernels`).
`LocalModel` loads on first use: importing this package imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from rllm.inference.options import InferenceOptions

_LAZY = {"LocalModel": "rllm.inference.model", "PromptTooLongError": "rllm.inference.model"}

__all__ = ["InferenceOptions", "LocalModel", "PromptTooLongError"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

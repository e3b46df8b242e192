"""Test doubles that speak real protocols: a fake OpenAI-compatible HTTP server (needs the `dev` extra: aiohttp).

Imported lazily so `import rllm.testing` costs nothing until a fake is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Fault": "rllm.testing.fake_openai_server",
    "FakeOpenAIServer": "rllm.testing.fake_openai_server",
    "FakeReply": "rllm.testing.fake_openai_server",
    "run_fake_server": "rllm.testing.fake_openai_server",
    "spawn_fake_server": "rllm.testing.fake_openai_server",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

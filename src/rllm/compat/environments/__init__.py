"""rLLM v0.2's environment modules, for code written against rLLM (see the README's "Coming from rLLM"). rllm's own
environments live in `rllm.envs` and with their tasks in `rllm.tasks`."""

from __future__ import annotations

import importlib
from typing import Any

from rllm.compat.environments.base import BaseEnv, MultiTurnEnvironment, SingleTurnEnvironment

__all__ = ["BaseEnv", "FrozenLakeEnv", "MultiTurnEnvironment", "SingleTurnEnvironment", "ToolEnvironment"]

# Imported on first use, as rLLM does: each pulls in its own dependencies (gymnasium, the tools).
_LAZY = {
    "FrozenLakeEnv": "rllm.compat.environments.frozenlake.frozenlake",
    "ToolEnvironment": "rllm.compat.environments.tools.tool_env",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rllm.environments' has no attribute {name!r}")

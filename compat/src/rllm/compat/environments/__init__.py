"""rLLM v0.2's environment modules, for code written against rLLM (see docs/compat.md). rllm's own
environments live in `rllm.envs` and with their tasks in `rllm.tasks`."""

from __future__ import annotations

import importlib
from typing import Any

from rllm.compat.environments.base import BaseEnv, MultiTurnEnvironment, SingleTurnEnvironment

# Imported on first use, as rLLM does: each pulls in its own dependencies (gymnasium, the tools, the sandbox, the
# browser). AppWorldEnv imports without the appworld library and says what to install when constructed.
_LAZY = {
    "FrozenLakeEnv": "rllm.compat.environments.frozenlake.frozenlake",
    "ToolEnvironment": "rllm.compat.environments.tools.tool_env",
    "AppWorldEnv": "rllm.compat.environments.appworld.appworld_env",
    "BrowserGymEnv": "rllm.compat.environments.browsergym.browsergym",
    "CompetitionCodingEnv": "rllm.compat.environments.code.competition_coding",
    "SWEEnv": "rllm.compat.environments.swe.swe",
}
__all__ = [
    "AppWorldEnv",
    "BaseEnv",
    "BrowserGymEnv",
    "CompetitionCodingEnv",
    "FrozenLakeEnv",
    "MultiTurnEnvironment",
    "SWEEnv",
    "SingleTurnEnvironment",
    "ToolEnvironment",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rllm.environments' has no attribute {name!r}")

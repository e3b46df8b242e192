"""rLLM v0.2's agent and env classes by name (its `env_agent_mappings`), for workflows given `agent_cls="..."`.
Only the ones rllm has; another name is an error listing them."""

from __future__ import annotations

import importlib
from typing import Any

AGENTS = {
    "frozenlakeagent": "rllm.compat.agents.frozenlake_agent:FrozenLakeAgent",
    "tool_agent": "rllm.compat.agents.tool_agent:ToolAgent",
}
ENVS = {
    "frozenlake": "rllm.compat.environments.frozenlake.frozenlake:FrozenLakeEnv",
    "tool": "rllm.compat.environments.tools.tool_env:ToolEnvironment",
    "math": "rllm.compat.environments.base.single_turn_env:SingleTurnEnvironment",
    "single_turn_env": "rllm.compat.environments.base.single_turn_env:SingleTurnEnvironment",
}


def resolve(value: Any, table: dict[str, str], kind: str) -> Any:
    """`value` itself, or the class rLLM names `value`."""
    if not isinstance(value, str):
        return value
    if value not in table:
        raise ValueError(f"unknown rLLM {kind} name {value!r}; rllm has {sorted(table)} (or pass the class itself)")
    module, _, name = table[value].partition(":")
    return getattr(importlib.import_module(module), name)

"""rLLM v0.2's names for its agent, env and workflow classes (`rllm.agent.name: tool_agent`, `agent_cls="..."`):
one table, used by rLLM's `AgentTrainer` config keys and by its workflows' `agent_cls`/`env_cls` strings.

rLLM's module maps each name to the class itself, importing every agent and env up front; here a name maps to
"module:Class" and the class is imported when it is looked up (`ENV_CLASS_MAPPING["swe"]`), so naming the FrozenLake
agent does not import the browser or the SWE sandbox."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "AGENT_CLASSES",
    "AGENT_CLASS_MAPPING",
    "ENV_CLASSES",
    "ENV_CLASS_MAPPING",
    "WORKFLOW_CLASSES",
    "WORKFLOW_CLASS_MAPPING",
    "resolve",
]

_SINGLE_TURN = "rllm.compat.environments.base.single_turn_env:SingleTurnEnvironment"
ENV_CLASSES = {
    "browsergym": "rllm.compat.environments.browsergym.browsergym:BrowserGymEnv",
    "frozenlake": "rllm.compat.environments.frozenlake.frozenlake:FrozenLakeEnv",
    "tool": "rllm.compat.environments.tools.tool_env:ToolEnvironment",
    "math": _SINGLE_TURN,
    "code": _SINGLE_TURN,
    "swe": "rllm.compat.environments.swe.swe:SWEEnv",
    "competition_coding": "rllm.compat.environments.code.competition_coding:CompetitionCodingEnv",
    "single_turn_env": _SINGLE_TURN,
}
AGENT_CLASSES = {
    "miniwobagent": "rllm.compat.agents.miniwob_agent:MiniWobAgent",
    "frozenlakeagent": "rllm.compat.agents.frozenlake_agent:FrozenLakeAgent",
    "tool_agent": "rllm.compat.agents.tool_agent:ToolAgent",
    "sweagent": "rllm.compat.agents.swe_agent:SWEAgent",
    "math_agent": "rllm.compat.agents.math_agent:MathAgent",
    "code_agent": "rllm.compat.agents.code_agent:CompetitionCodingAgent",
}
WORKFLOW_CLASSES = {
    "single_turn_workflow": "rllm.compat.workflows.single_turn_workflow:SingleTurnWorkflow",
    "multi_turn_workflow": "rllm.compat.workflows.multi_turn_workflow:MultiTurnWorkflow",
    "simple_workflow": "rllm.compat.workflows.simple_workflow:SimpleWorkflow",
    "cumulative_workflow": "rllm.compat.workflows.cumulative_workflow:CumulativeWorkflow",
}


def resolve(value: Any, table: dict[str, str], what: str) -> Any:
    """`value` itself when it is a class, else the class rLLM calls `value`; `what` names the setting in errors
    (`"rllm.agent.name"`, `"agent_cls"`)."""
    if not isinstance(value, str):
        return value
    if value not in table:
        known = ", ".join(sorted(table))
        raise ValueError(
            f"{what}={value!r}: no rLLM class has that name here; give the class itself, or one of: {known}"
        )
    module, _, name = table[value].partition(":")
    return getattr(importlib.import_module(module), name)


class _Classes(Mapping):
    """rLLM's `*_CLASS_MAPPING`: name -> class, imported on lookup."""

    def __init__(self, table: dict[str, str], what: str) -> None:
        self._table, self._what = table, what

    def __getitem__(self, name: str) -> type:
        if name not in self._table:
            raise KeyError(name)
        return resolve(name, self._table, self._what)

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


ENV_CLASS_MAPPING = _Classes(ENV_CLASSES, "env")
AGENT_CLASS_MAPPING = _Classes(AGENT_CLASSES, "agent")
WORKFLOW_CLASS_MAPPING = _Classes(WORKFLOW_CLASSES, "workflow")

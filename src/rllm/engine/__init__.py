"""Rollout engines: run many agent/env (or workflow) rollouts concurrently and return `Episode`s."""

from __future__ import annotations

from typing import Any

__all__ = ["AgentExecutionEngine", "AgentWorkflowEngine", "ModelOutput", "OpenAIEngine", "RolloutEngine"]

# rLLM v0.2's names for its workflows (`from rllm.engine import ModelOutput, OpenAIEngine, RolloutEngine`). rLLM's
# own AgentExecutionEngine/AgentWorkflowEngine constructors are in rllm.engine.agent_execution_engine and
# rllm.engine.agent_workflow_engine; the names here are rllm's.
_ROLLOUT_NAMES = ("ModelOutput", "OpenAIEngine", "RolloutEngine")


def __getattr__(name: str) -> Any:
    if name == "AgentExecutionEngine":
        from rllm.engine.execution import AgentExecutionEngine

        return AgentExecutionEngine
    if name == "AgentWorkflowEngine":
        from rllm.engine.workflow_engine import AgentWorkflowEngine

        return AgentWorkflowEngine
    if name in _ROLLOUT_NAMES:
        from rllm.engine import rollout

        return getattr(rollout, name)
    raise AttributeError(name)

"""Rollout engines: run many agent/env (or workflow) rollouts concurrently and return `Episode`s."""

from __future__ import annotations

from typing import Any

__all__ = ["AgentExecutionEngine", "AgentWorkflowEngine"]


def __getattr__(name: str) -> Any:
    if name == "AgentExecutionEngine":
        from rllm.engine.execution import AgentExecutionEngine

        return AgentExecutionEngine
    if name == "AgentWorkflowEngine":
        from rllm.engine.workflow_engine import AgentWorkflowEngine

        return AgentWorkflowEngine
    raise AttributeError(name)

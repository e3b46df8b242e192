"""Rollout engines: run many agent/env (or workflow) rollouts concurrently and return `Episode`s.

rLLM v0.2's engine names (`RolloutEngine`, `OpenAIEngine`, `ModelOutput`, `rllm.engine.agent_execution_engine`) are
in `rllm.compat.engine`, served here by the rule in `rllm.compat`."""

from __future__ import annotations

from rllm.engine.execution import AgentExecutionEngine
from rllm.engine.workflow_engine import AgentWorkflowEngine

__all__ = ["AgentExecutionEngine", "AgentWorkflowEngine"]

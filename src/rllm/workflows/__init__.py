"""Workflows: free async Python that calls the model, steps envs and commits named trajectories; and the built-ins
(`agent_env`: the BaseAgent/BaseEnv loop, `single_turn`: one call + a reward function, `solver_judge`)."""

from __future__ import annotations

import importlib

from rllm.workflows.base import Workflow, WorkflowServices, discounted_step_rewards
from rllm.workflows.runtime import TerminationEvent

__all__ = ["BUILTIN_WORKFLOWS", "TerminationEvent", "Workflow", "WorkflowServices", "discounted_step_rewards",
           "get_workflow"]  # fmt: skip

BUILTIN_WORKFLOWS = {
    "agent_env": "rllm.workflows.agent_env:AgentEnvWorkflow",
    "single_turn": "rllm.workflows.single_turn:SingleTurnWorkflow",
    "solver_judge": "rllm.workflows.solver_judge:SolverJudgeWorkflow",
}


def get_workflow(name: str) -> type[Workflow]:
    """A built-in workflow by name, or any Workflow subclass by import path `"package.module:Class"`."""
    path = BUILTIN_WORKFLOWS.get(name, name)
    module, _, attr = path.partition(":")
    if not attr:
        known = ", ".join(sorted(BUILTIN_WORKFLOWS))
        raise ValueError(f"unknown workflow {name!r}; built-in: {known}, or give 'package.module:Class'")
    try:
        workflow = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"workflow {name!r}: cannot import {attr} from {module} ({exc})") from exc
    if not (isinstance(workflow, type) and issubclass(workflow, Workflow)):
        raise TypeError(f"{name!r} is not a subclass of rllm.workflows.Workflow")
    return workflow

"""Workflows: free async Python that calls the model, steps envs and commits named trajectories; and the built-ins
(`agent_env`: the BaseAgent/BaseEnv loop, `single_turn`: one call + a reward function, `solver_judge`)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from rllm.workflows.base import Workflow, WorkflowServices
from rllm.workflows.runtime import TerminationEvent

__all__ = ["BUILTIN_WORKFLOWS", "TerminationEvent", "Workflow", "WorkflowServices", "get_workflow"]

# rLLM v0.2's names (`from rllm.workflows import MultiTurnWorkflow`) are in rllm.compat.workflows, served here by the
# rule in rllm.compat. `Workflow` and `TerminationEvent` above are rllm's own; rLLM's are in rllm.workflows.workflow.

BUILTIN_WORKFLOWS = {
    "agent_env": "rllm.workflows.agent_env:AgentEnvWorkflow",
    "single_turn": "rllm.workflows.single_turn:SingleTurnWorkflow",
    "solver_judge": "rllm.workflows.solver_judge:SolverJudgeWorkflow",
}


def get_workflow(name: str) -> type[Workflow]:
    """A built-in workflow by name, or any Workflow subclass by import path `"package.module:Class"` or by file
    `"path/to/file.py:Class"` (relative to the current directory; `@rllm.rollout` functions are such classes)."""
    path = BUILTIN_WORKFLOWS.get(name, name)
    module, _, attr = path.rpartition(":")
    if not attr or not module:
        known = ", ".join(sorted(BUILTIN_WORKFLOWS))
        raise ValueError(
            f"unknown workflow {name!r}; built-in: {known}, or give 'package.module:Class' or 'path/to/file.py:Class'"
        )
    try:
        loaded = _import_file(module) if module.endswith(".py") else importlib.import_module(module)
        workflow = getattr(loaded, attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"workflow {name!r}: cannot import {attr} from {module} ({exc})") from exc
    if not (isinstance(workflow, type) and issubclass(workflow, Workflow)):
        raise TypeError(f"{name!r} is not a subclass of rllm.workflows.Workflow")
    return workflow


def _import_file(path: str):
    """Import a Python file once per absolute path (so resolving twice gives the same class)."""
    file = Path(path).resolve()
    if not file.is_file():
        raise ImportError(f"no file {path} (relative paths start from the current directory, {Path.cwd()})")
    digest = hashlib.blake2b(str(file).encode(), digest_size=4).hexdigest()
    name = f"rllm_user_{file.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module

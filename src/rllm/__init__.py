"""rllm: train language agents with reinforcement learning.

`import rllm` stays light: it never imports torch, transformers, vllm, ray or verl. Heavy pieces load on first use
(`rllm.LocalModel`, ...), from the adapter module that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

# First, before any rllm module: the finder that serves rLLM v0.2's paths must see the native packages load (it gives
# `rllm.agents`, `rllm.engine`, ... their fallback onto rLLM's names). Importing rllm.compat installs it.
import rllm.compat  # noqa: F401  (the rule: `rllm.X` is `rllm.compat.X` where rllm has no `rllm.X` of its own)

# isort: split
from rllm.agents.base import BaseAgent
from rllm.envs.base import BaseEnv
from rllm.errors import InfraError, ModelNotAvailableError, PolicyError
from rllm.models.base import ModelClient, SamplingParams
from rllm.types import Action, Episode, ModelOutput, Step, TerminationReason, ToolCall, Trajectory

__version__ = "0.1.0"

# Public names that live in modules with heavier imports: loaded on first attribute access.
_LAZY = {
    "AgentExecutionEngine": "rllm.engine.execution",
    "AgentTrainer": "rllm.training.trainer",
    "SFTTrainer": "rllm.training.sft",
    "DPOTrainer": "rllm.training.dpo",
    "TrainConfig": "rllm.config",
    "load_config": "rllm.config",
    "AgentWorkflowEngine": "rllm.engine.workflow_engine",
    "TerminationEvent": "rllm.workflows.runtime",
    "Workflow": "rllm.workflows.base",
    "ChatRenderer": "rllm.models.chat",
    "FakeModel": "rllm.models.fake",
    "LocalModel": "rllm.models.local",
    "OpenAIClient": "rllm.models.openai",
    "check_env": "rllm.envs.checker",
    "rollout": "rllm.gateway.rollout",
}

__all__ = [
    "Action",
    "AgentExecutionEngine",
    "AgentTrainer",
    "AgentWorkflowEngine",
    "BaseAgent",
    "BaseEnv",
    "ChatRenderer",
    "DPOTrainer",
    "Episode",
    "FakeModel",
    "InfraError",
    "LocalModel",
    "ModelClient",
    "ModelNotAvailableError",
    "ModelOutput",
    "OpenAIClient",
    "PolicyError",
    "SFTTrainer",
    "SamplingParams",
    "Step",
    "TerminationEvent",
    "TerminationReason",
    "ToolCall",
    "TrainConfig",
    "Trajectory",
    "Workflow",
    "check_env",
    "load_config",
    "rollout",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

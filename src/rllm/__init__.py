"""rllm: train language agents with reinforcement learning.

`import rllm` stays light: it never imports torch, transformers, vllm, ray or verl. Heavy pieces load on first use
(`rllm.LocalModel`, ...), from the adapter module that needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from typing import Any

# rllm.compat (rLLM v0.2's names) is a distribution of its own, rllm-compat, which may be installed in another folder
# than this one (an editable checkout's compat/src): the package's path lists the other portions of `rllm` on
# sys.path, never a second copy of the core (a folder with its own __init__.py, such as an installed wheel's when
# this one is a checkout's src/ on PYTHONPATH).
__path__ = [__path__[0]] + [
    path
    for path in pkgutil.extend_path(__path__, __name__)[1:]
    if not os.path.isfile(os.path.join(path, "__init__.py"))
]

# First, before any rllm module: the finder that serves rLLM v0.2's paths must see the native packages load (it gives
# `rllm.agents`, `rllm.engine`, ... their fallback onto rLLM's names). Importing rllm.compat installs it; without
# the distribution, a hint that names it answers the rLLM paths nothing else finds.
if importlib.util.find_spec("rllm.compat") is not None:
    import rllm.compat  # noqa: F401  (the rule: `rllm.X` is `rllm.compat.X` where rllm has no `rllm.X` of its own)
else:
    from rllm.compat_hint import install_compat_hint

    install_compat_hint()

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
    "LocalModel": "rllm.inference.model",
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

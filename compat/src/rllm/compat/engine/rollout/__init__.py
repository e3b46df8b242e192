"""rLLM v0.2's `rllm.engine.rollout`: the rollout-engine interface its workflows call."""

from rllm.compat.engine.rollout.openai_engine import OpenAIEngine
from rllm.compat.engine.rollout.rollout_engine import ClientRolloutEngine, ModelOutput, RolloutEngine

__all__ = ["ClientRolloutEngine", "ModelOutput", "OpenAIEngine", "RolloutEngine"]

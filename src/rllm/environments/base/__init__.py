"""rLLM v0.2's `rllm.environments.base`."""

from rllm.environments.base.base_env import BaseEnv
from rllm.environments.base.multi_turn_env import MultiTurnEnvironment
from rllm.environments.base.single_turn_env import SingleTurnEnvironment

__all__ = ["BaseEnv", "MultiTurnEnvironment", "SingleTurnEnvironment"]

"""rLLM v0.2's `rllm.environments.base`."""

from rllm.compat.environments.base.base_env import BaseEnv
from rllm.compat.environments.base.multi_turn_env import MultiTurnEnvironment
from rllm.compat.environments.base.single_turn_env import SingleTurnEnvironment

__all__ = ["BaseEnv", "MultiTurnEnvironment", "SingleTurnEnvironment"]

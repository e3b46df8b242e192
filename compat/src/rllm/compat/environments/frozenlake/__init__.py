"""rLLM v0.2's `rllm.environments.frozenlake`: its FrozenLake environment (see `frozenlake.py`)."""

from rllm.compat.environments.frozenlake.frozenlake import FrozenLakeEnv

__all__ = ["FrozenLakeEnv"]

"""rLLM v0.2's environment modules, for code written against rLLM (see the README's "Coming from rLLM"). rllm's own
environments live in `rllm.envs` and with their tasks in `rllm.tasks`."""

from rllm.environments.base import BaseEnv, MultiTurnEnvironment, SingleTurnEnvironment

__all__ = ["BaseEnv", "MultiTurnEnvironment", "SingleTurnEnvironment"]

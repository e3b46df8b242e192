"""rLLM v0.2's `rllm.environments.base.base_env`: its `BaseEnv` is rllm's own (`rllm.envs.BaseEnv`): the same
`reset() -> (observation, info)`, `step(action) -> (observation, reward, done, info)`, `close()`, `from_dict(task)`
(a `@staticmethod` override works as rLLM writes it), `is_multithread_safe()` and `idx`.

One difference: rLLM refuses envs that are not multithread safe; rllm runs them one call at a time instead."""

from rllm.envs.base import BaseEnv

__all__ = ["BaseEnv"]

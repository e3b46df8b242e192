"""`BaseEnv`: the environment side of an agent/env rollout, shaped like gymnasium's `Env` but with text in and out.

Life cycle, per rollout: `env = EnvClass.from_dict(task)` (one env per dataset row), `obs, info = env.reset()`, then
`obs, reward, done, info = env.step(action)` until `done`, then `env.close()`. Observations, rewards and infos must
be JSON-serialisable (they are written to disk with the episode); `rllm.envs.check_env` checks all of this.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["BaseEnv"]


class BaseEnv(ABC):
    # True (the safe default): the engine runs reset/step/close on a thread pool so a slow call never stalls other
    # rollouts. Envs whose calls return in microseconds (pure Python state, no I/O, no subprocess) set False: the
    # engine then calls them inline on its event loop and saves a thread hop (and a GIL hand-off) per call.
    blocking: bool = True

    @abstractmethod
    def reset(self) -> tuple[Any, dict]:
        """Start the episode; return the first observation and an info dict."""

    @abstractmethod
    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        """Apply the agent's action; return (observation, reward, done, info)."""

    def close(self) -> None:
        """Release what the env holds (processes, files, connections). Called once per rollout, always."""

    @classmethod
    @abstractmethod
    def from_dict(cls, task: dict) -> BaseEnv:
        """Build the env for one dataset row (the engine merges `env_args` into the row first)."""

    @property
    def idx(self) -> Any:
        """rLLM v0.2's engines number their envs; None unless someone set it."""
        return getattr(self, "_idx", None)

    @idx.setter
    def idx(self, value: Any) -> None:
        self._idx = value

    @staticmethod
    def is_multithread_safe() -> bool:
        """True if several instances may run `reset`/`step` in parallel threads. The engine runs unsafe envs on one
        worker thread at a time."""
        return True

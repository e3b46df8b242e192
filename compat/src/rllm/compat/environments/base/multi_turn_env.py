"""rLLM v0.2's `MultiTurnEnvironment`: the task is the first observation, each action is scored by
`get_reward_and_next_obs(task, action)`, and the episode ends after `max_turns` actions. As in rLLM, `step` returns
the task as its info and `{}` as the last observation."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from rllm.envs.base import BaseEnv

__all__ = ["MultiTurnEnvironment"]


class MultiTurnEnvironment(BaseEnv):
    def __init__(self, task: dict | None = None, max_turns: int = 3, **kwargs: Any) -> None:
        self.task = task
        self.max_turns = max_turns
        self.current_turn = 0
        self.done = False
        self.history: list[Any] = []

    def reset(self, task: dict | None = None) -> tuple[Any, dict]:
        if task is not None:
            self.task = task
        self.current_turn, self.done, self.history = 0, False, []
        return self.task, {}

    def step(self, action: Any) -> tuple[Any, float, bool, Any]:
        self.history.append(action)
        reward, next_observation = self.get_reward_and_next_obs(self.task, action)
        self.current_turn += 1
        if self.current_turn >= self.max_turns:
            self.done = True
            return {}, reward, self.done, self.task
        return next_observation, reward, self.done, self.task

    @abstractmethod
    def get_reward_and_next_obs(self, task: dict, action: Any) -> tuple[float, Any]:
        """The reward of `action` and the next observation."""

    @staticmethod
    def from_dict(env_args: dict) -> MultiTurnEnvironment:
        raise NotImplementedError("MultiTurnEnvironment is abstract: subclass it and define from_dict")

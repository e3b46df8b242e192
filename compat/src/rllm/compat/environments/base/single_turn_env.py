"""rLLM v0.2's `SingleTurnEnvironment`: one action, scored by `reward_fn(task_info=task, action=action)` (rLLM's
reward-function signature, called by keyword). The first observation is the whole task dict.

As in rLLM, a missing `reward_fn` gives reward 0 with a warning; a reward that is not a finite number is refused at
the env boundary (`rllm.workflows.agent_env`), naming this class."""

from __future__ import annotations

import warnings
from typing import Any

from rllm.compat.environments.base.multi_turn_env import MultiTurnEnvironment

__all__ = ["SingleTurnEnvironment"]


class SingleTurnEnvironment(MultiTurnEnvironment):
    def __init__(self, task: dict | None = None, reward_fn: Any = None, **kwargs: Any) -> None:
        super().__init__(task=task, max_turns=1, **kwargs)
        if reward_fn is None:
            warnings.warn("SingleTurnEnvironment got no reward_fn: every reward is 0", stacklevel=2)
        self.reward_fn = reward_fn

    def get_reward_and_next_obs(self, task: dict, action: Any) -> tuple[float, dict]:
        if self.reward_fn is None:
            return 0.0, {}
        return self.reward_fn(task_info=task, action=action).reward, {}

    @staticmethod
    def from_dict(env_args: dict) -> SingleTurnEnvironment:
        env_args = dict(env_args)
        reward_fn = env_args.pop("reward_fn", None)
        task = env_args["task"] if "task" in env_args else env_args
        return SingleTurnEnvironment(task=task, reward_fn=reward_fn)

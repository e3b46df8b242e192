"""rLLM v0.2's `CompetitionCodingEnv`: a coding problem over several turns, each answer graded by the code reward.

`reset()` gives the task row (the agent reads its `question`); `step(answer)` grades the answer with `reward_fn`
(default: `rllm.rewards.reward_fn.code_reward_fn`, which runs the row's tests in rllm's sandbox) and gives the
grader's metadata (its `test_results`) as the next observation, so `CompetitionCodingAgent` can revise. After
`max_turns` answers the episode ends (observation `{}`, info the task, as in rLLM's multi-turn envs). With
`reward_bonus_coeff`, a turn's reward is raised (or lowered) by that share of its improvement over the previous turn.

rLLM leaves `reward_fn` unset and calls it with an older signature (`data_source=`, `llm_solution=`,
`ground_truth=`); here it is any rLLM `RewardFunction`, called `reward_fn(task_info=task, action=answer)`.
"""

from __future__ import annotations

import random
from typing import Any

from rllm.compat.environments.base.multi_turn_env import MultiTurnEnvironment

__all__ = ["CompetitionCodingEnv"]

_OPTIONS = ("max_turns", "reward_bonus_coeff", "reward_fn")


def _default_reward_fn() -> Any:
    from rllm.compat.rewards.reward_fn import code_reward_fn

    return code_reward_fn


class CompetitionCodingEnv(MultiTurnEnvironment):
    def __init__(
        self,
        task: dict | None = None,
        max_turns: int = 2,
        reward_bonus_coeff: float = 0.0,
        reward_fn: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(task=task, max_turns=max_turns, **kwargs)
        self.reward_fn = reward_fn
        self.reward_bonus_coeff = float(reward_bonus_coeff)
        self.prev_reward: float | None = None

    def reset(self, task: dict | None = None, seed: int | None = None) -> tuple[Any, dict]:
        if seed is not None:
            random.seed(seed)
        if task is not None:
            self.task = task
        if self.task is None:
            raise ValueError("CompetitionCodingEnv: no task; give task= or reset(task=...)")
        self.prev_reward = None
        return super().reset()

    def step(self, action: Any) -> tuple[Any, float, bool, Any]:
        observation, raw, done, info = super().step(action)
        bonus = 0.0 if self.prev_reward is None else self.reward_bonus_coeff * (raw - self.prev_reward)
        self.prev_reward = raw
        return observation, raw + bonus, done, info

    def get_reward_and_next_obs(self, task: dict, action: Any) -> tuple[float, dict]:
        if self.reward_fn is None:
            self.reward_fn = _default_reward_fn()
        output = self.reward_fn(task_info=task, action=action)
        return float(output.reward), dict(output.metadata or {})

    @staticmethod
    def from_dict(env_args: dict) -> CompetitionCodingEnv:
        """rLLM's `{"task": row, ...}`, or the row itself with the env's options among its keys."""
        options = {key: env_args[key] for key in _OPTIONS if key in env_args}
        task = env_args["task"] if "task" in env_args else {k: v for k, v in env_args.items() if k not in _OPTIONS}
        return CompetitionCodingEnv(task=task, **options)

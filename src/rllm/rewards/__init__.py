"""Reward functions: pure functions from (task, response) to a reward. `sandbox.py` will be the only code runner."""

from rllm.rewards.base import RewardOutput, to_reward_output

__all__ = ["RewardOutput", "to_reward_output"]

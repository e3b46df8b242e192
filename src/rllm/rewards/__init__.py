"""Reward functions: pure functions from (task, response) to a reward.

- `math`: verified equivalence of the final answer (math-verify, with a hard timeout).
- `code`: a program's tests run in the sandbox (`rllm.sandbox`, the only code runner); 1 only if every selected test
  passes.
Submodules load on first use (math-verify and the sandbox are not needed by `import rllm.rewards`).
"""

from rllm.rewards.base import RewardOutput, to_reward_output

__all__ = ["RewardOutput", "to_reward_output"]

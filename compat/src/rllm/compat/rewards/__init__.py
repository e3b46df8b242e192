"""rLLM v0.2's `rllm.rewards` names. Served at `rllm.rewards` where rllm's own package does not define the name
(`RewardOutput` there is rllm's, which takes rLLM's `metadata=`). DeepScaleR's and DeepCoder's rewards are in the
modules, at rLLM's paths: `rllm.rewards.math_reward.RewardMathFn`, `rllm.rewards.code_reward.RewardCodeFn`,
`rllm.rewards.search_reward.RewardSearchFn` and the functions of `rllm.rewards.reward_fn`."""

from rllm.compat._lazy import lazy_names

_WHERE = {
    "RewardConfig": "reward_types",
    "RewardFunction": "reward_fn",
    "RewardInput": "reward_types",
    "RewardOutput": "reward_types",
    "RewardType": "reward_types",
    "zero_reward": "reward_fn",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)

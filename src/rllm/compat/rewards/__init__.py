"""rLLM v0.2's `rllm.rewards` names. Served at `rllm.rewards` where rllm's own package does not define the name
(`RewardOutput` there is rllm's, which takes rLLM's `metadata=`)."""

from rllm.compat._lazy import lazy_names

_WHERE = {
    "RewardFunction": "reward_fn",
    "RewardOutput": "reward_types",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)

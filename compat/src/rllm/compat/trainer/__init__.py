"""rLLM v0.2's training entry point, for rLLM training scripts run unchanged: `rllm.trainer.AgentTrainer` (also at
`rllm.trainer.agent_trainer`: rLLM's constructor over rllm's `rllm.training.AgentTrainer`),
`rllm.trainer.agent_sft_trainer.AgentSFTTrainer` (over rllm's SFT trainer), the Hydra config package
`rllm.trainer.config` (`agent_ppo_trainer.yaml`, `agent_sft_trainer.yaml`) and `rllm.trainer.translate` (rLLM/verl
config keys -> rllm's `TrainConfig`). rllm's own trainer is `rllm.training`. The names load on first use (nothing
here is imported by `import rllm`); Hydra is needed only to compose the config (`pip install rllm[compat]`)."""

from rllm.compat._lazy import lazy_names

_WHERE = {"AgentTrainer": "agent_trainer", "AgentSFTTrainer": "agent_sft_trainer"}
__all__ = sorted(_WHERE)
__getattr__ = lazy_names(__name__, _WHERE)

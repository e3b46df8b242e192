"""rLLM v0.2's training entry point, for rLLM training scripts run unchanged: `rllm.trainer.agent_trainer.AgentTrainer`
(rLLM's constructor over rllm's `rllm.training.AgentTrainer`), the Hydra config package `rllm.trainer.config`
(`agent_ppo_trainer.yaml`) and `rllm.trainer.translate` (rLLM/verl config keys -> rllm's `TrainConfig`).
rllm's own trainer is `rllm.training`. Nothing here is imported by `import rllm`; Hydra is needed only to compose
the config (`pip install rllm[compat]`)."""

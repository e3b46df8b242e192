"""rLLM v0.2's `rllm.engine.rollout.verl_engine.VerlEngine` wraps verl's in-process rollout workers. rllm runs verl
differently: its trainer's `trainer.backend: verl` owns verl's workers, and rollouts come from rllm's engine."""

raise ImportError(
    "rllm.engine.rollout.verl_engine is not available: verl's workers are driven by rllm's trainer "
    "(trainer.backend: verl); for sampling use rllm.engine.rollout.openai_engine.OpenAIEngine against a vLLM server"
)

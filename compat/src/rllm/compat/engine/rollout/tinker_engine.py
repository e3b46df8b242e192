"""rLLM v0.2's `rllm.engine.rollout.tinker_engine.TinkerEngine` samples from Thinking Machines' hosted Tinker service;
rllm has no Tinker backend (a named exception of issue 40: a hosted service this project cannot run or test)."""

raise ImportError(
    "rllm.engine.rollout.tinker_engine is not available: rllm has no Tinker backend; sample from any OpenAI-compatible "
    "server with rllm.engine.rollout.openai_engine.OpenAIEngine, or train with rllm's AgentTrainer (trainer.backend: "
    "torch or verl)"
)

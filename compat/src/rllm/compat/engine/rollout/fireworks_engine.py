"""rLLM v0.2's `rllm.engine.rollout.fireworks_engine` drives Fireworks' hosted fine-tuning; rllm has no Fireworks
backend (a named exception of issue 40)."""

raise ImportError(
    "rllm.engine.rollout.fireworks_engine is not available: rllm has no Fireworks backend; sample from any "
    "OpenAI-compatible server (Fireworks' included) with rllm.engine.rollout.openai_engine.OpenAIEngine"
)

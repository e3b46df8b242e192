"""rLLM v0.2's `rllm.trainer.tinker` trains through Thinking Machines' hosted Tinker service; rllm has no Tinker
backend (a named exception of issue 40)."""

raise ImportError(
    "rllm.trainer.tinker is not available: rllm has no Tinker backend; train with rllm.trainer.AgentTrainer "
    "(rLLM's constructor; trainer.backend torch or verl) or `rllm train`"
)

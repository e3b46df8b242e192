"""rLLM v0.2's `rllm.integrations.terminal_terminus_1` (`RLLMModel`, Terminal-Bench's Terminus agent on an rLLM
rollout engine) cannot be served here: `terminal-bench` is not on PyPI. Terminus reaches rllm's training instead
through rllm's gateway (point its LiteLLM model at `rllm serve gateway`), or any OpenAI-SDK agent through
`@rllm.rollout`."""

raise ImportError(
    "rllm.integrations.terminal_terminus_1 is not available: terminal-bench is not on PyPI; point Terminus's model at "
    "rllm's gateway (`rllm serve gateway`), or wrap an OpenAI-SDK agent in @rllm.rollout"
)

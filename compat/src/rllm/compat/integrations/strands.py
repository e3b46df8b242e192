"""rLLM v0.2's `rllm.integrations.strands` (`RLLMModel`, `StrandsAgent`) cannot be served here: `strands-agents` pins
`mcp<2.2` and rllm pins `mcp==2.3.0`, so the two do not install together. A Strands agent reaches rllm's training
instead through rllm's gateway (point the agent's OpenAI-compatible model at `rllm serve gateway`), or any OpenAI-SDK
agent through `@rllm.rollout`."""

raise ImportError(
    "rllm.integrations.strands is not available: strands-agents pins mcp<2.2 and rllm pins mcp==2.3.0; point the "
    "Strands agent's OpenAI-compatible model at rllm's gateway (`rllm serve gateway`), or wrap an OpenAI-SDK agent in "
    "@rllm.rollout"
)

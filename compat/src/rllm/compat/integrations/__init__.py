"""rLLM v0.2's third-party agent integrations (`rllm.integrations.*`), each a module of its own so that importing one
never imports another's library:

- `rllm.integrations.smolagents`: `RLLMOpenAIModel`, `AsyncCodeAgent`, `AsyncToolCallingAgent` (needs `smolagents`,
  in the `compat` extra).
- `rllm.integrations.strands` and `rllm.integrations.terminal_terminus_1`: their libraries do not install here;
  importing them raises an ImportError that names what to use instead (rllm's gateway, `rllm serve gateway`, or
  `@rllm.rollout` around any OpenAI-SDK agent).
"""

__all__: list[str] = []

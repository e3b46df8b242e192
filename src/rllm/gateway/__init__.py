"""An OpenAI-compatible gateway over rllm's model clients: agent code that only knows `openai.OpenAI(base_url=...)`
is rolled out (and trained) through per-session URLs, with the exact sampled token ids recorded for training.

- `Gateway` (`rllm.gateway.server`): the HTTP server, standalone (`rllm serve gateway`) or shared by rollouts.
- `GatewaySession`, `CallRecord` (`rllm.gateway.session`): one conversation and what it recorded.
- `rllm.rollout` (`rllm.gateway.rollout`): the decorator that turns `fn(task, base_url)` into a Workflow.
"""

from __future__ import annotations

from rllm.gateway.server import Gateway, shared_gateway
from rllm.gateway.session import CallRecord, GatewaySession, SessionClosedError

__all__ = ["CallRecord", "Gateway", "GatewaySession", "SessionClosedError", "shared_gateway"]

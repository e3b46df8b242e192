"""rLLM v0.2.1's SDK (`rllm.sdk`), over rllm's gateway: agent code that calls an OpenAI client inside `session()`
blocks (or `@trajectory` functions) gets its calls back as `StepView`s, with the exact token ids the model saw and
sampled when the client talks to an rllm gateway (`rllm serve gateway`, `rllm.gateway.Gateway`).

    from rllm.sdk import get_chat_client, session, trajectory
    client = get_chat_client(base_url="http://127.0.0.1:8090/v1", api_key="none")
    with session(task_id="t1") as s:
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "2+2?"}])
    s.steps[0].output["output_token_ids"]

To train such an agent, make it a rollout function: `@rllm.rollout def solve(task, base_url)` that builds its client
with `get_chat_client(base_url=base_url)` (rllm.gateway.rollout); the gateway then records every call for the
trainer. `rllm.sdk.data_process.trajectory_view_to_trajectory` turns scored views into rllm trajectories.

Not here (the names import, using them raises naming the gateway): rLLM's OpenTelemetry session backend, its LiteLLM
proxy (`rllm.sdk.proxy.proxy_manager.ProxyManager`), its SQLite tracer and store (`SqliteTracer`,
`rllm.sdk.store.SqliteTraceStore`), and its SDK trainer (`AgentTrainer(agent_run_func=...)`).
"""

import sys

from rllm.compat.sdk.decorators import trajectory
from rllm.compat.sdk.protocol import StepView, Trace, TrajectoryView
from rllm.compat.sdk.session import (
    ContextVarSession,
    SessionBuffer,
    SessionBufferProtocol,
    SessionContext,
    get_current_metadata,
    get_current_session,
    get_current_session_name,
)
from rllm.compat.sdk.shortcuts import get_chat_client, get_chat_client_async, session
from rllm.compat.sdk.tracers import InMemorySessionTracer, SqliteTracer, TracerProtocol

__all__ = [
    "ContextVarSession",
    "InMemorySessionTracer",
    "SessionBuffer",
    "SessionBufferProtocol",
    "SessionContext",
    "SqliteTracer",
    "StepView",
    "Trace",
    "TracerProtocol",
    "TrajectoryView",
    "get_chat_client",
    "get_chat_client_async",
    "get_current_metadata",
    "get_current_session",
    "get_current_session_name",
    "session",
    "trajectory",
]

# `session` is a subpackage and, as in rLLM, the function that wins its name here. The subpackage is registered at
# rLLM's path now: importing it later under that path for the first time would rebind `rllm.sdk.session` to it.
sys.modules.setdefault("rllm.sdk.session", sys.modules["rllm.compat.sdk.session"])

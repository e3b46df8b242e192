"""rLLM v0.2's SDK tracers. Sessions here record their calls themselves (`rllm.sdk.chat`), so
`InMemorySessionTracer` is rLLM's in-memory tracer as a small standalone class (it appends a trace to the sessions it
is given); `SqliteTracer` (rLLM's persistent tracer behind its proxy) imports and raises on use."""

from __future__ import annotations

import time
import uuid
from typing import Any, Protocol, runtime_checkable

from rllm.compat.sdk._unavailable import unavailable_class
from rllm.compat.sdk.protocol import LLMInput, LLMOutput, Trace

__all__ = ["InMemorySessionTracer", "SqliteTracer", "TracerProtocol"]


@runtime_checkable
class TracerProtocol(Protocol):
    def log_llm_call(
        self, name: str, input: Any, output: Any, model: str, latency_ms: float, tokens: dict[str, int], **kwargs: Any
    ) -> None: ...

    def flush(self, timeout: float = 30.0) -> bool: ...


class InMemorySessionTracer:
    """Appends a trace of each logged call to the sessions given (`sessions=`); without sessions it is dropped."""

    def __init__(self, formatter: Any = None) -> None:
        self.formatter = formatter or (lambda trace: trace)

    def log_llm_call(
        self,
        name: str,
        input: Any,
        output: Any,
        model: str,
        latency_ms: float,
        tokens: dict[str, int],
        session_name: str | None = None,
        metadata: dict | None = None,
        trace_id: str | None = None,
        sessions: list | None = None,
        **fields: Any,
    ) -> None:
        if not sessions:
            return
        choice = ((output or {}).get("choices") or [{}])[0] if isinstance(output, dict) else {}
        messages = input.get("messages", []) if isinstance(input, dict) else list(input or [])
        trace = Trace(
            trace_id=trace_id or f"tr_{uuid.uuid4().hex[:16]}",
            session_name=session_name or "",
            name=name,
            input=LLMInput(messages=messages, prompt_token_ids=list((output or {}).get("prompt_token_ids") or [])),
            output=LLMOutput(message=choice.get("message") or {}, finish_reason=choice.get("finish_reason")),
            model=model,
            latency_ms=latency_ms,
            tokens=tokens,
            metadata=metadata or {},
            timestamp=time.time(),
            **{
                key: fields[key]
                for key in ("parent_trace_id", "cost", "environment", "tools", "contexts", "tags")
                if key in fields
            },
        )
        for session in sessions:
            session.storage.add_trace(session._session_uid_chain, session.name, trace)

    def flush(self, timeout: float = 30.0) -> bool:
        return True

    async def close(self, timeout: float = 30.0) -> None:
        return None


SqliteTracer = unavailable_class("SqliteTracer", "SQLite tracer (its LiteLLM proxy's trace store)")

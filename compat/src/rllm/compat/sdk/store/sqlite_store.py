"""rLLM v0.2's SQLite trace store: not part of rllm (see `rllm.sdk.store`)."""

from rllm.compat.sdk._unavailable import unavailable_class

__all__ = ["SqliteTraceStore", "TraceContext"]

SqliteTraceStore = unavailable_class("SqliteTraceStore", "SQLite trace store (what its LiteLLM proxy persisted)")
TraceContext = unavailable_class("TraceContext", "SQLite trace store's record")

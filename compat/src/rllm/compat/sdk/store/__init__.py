"""rLLM v0.2's `SqliteTraceStore` (the traces its LiteLLM proxy persisted): imports, and raises on use, naming the
gateway's recorded calls."""

from rllm.compat.sdk.store.sqlite_store import SqliteTraceStore, TraceContext

__all__ = ["SqliteTraceStore", "TraceContext"]

"""rLLM v0.2's `SessionBuffer`: a session's in-memory traces, keyed by session uid (a trace is added under every uid
of the chain of sessions it was made in, so an outer session also sees its inner sessions' calls)."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Protocol, runtime_checkable

from rllm.compat.sdk.protocol import Trace

__all__ = ["SessionBuffer", "SessionBufferProtocol"]


@runtime_checkable
class SessionBufferProtocol(Protocol):
    def add_trace(self, session_uid_chain: list[str], session_name: str, trace: Trace) -> None: ...

    def get_traces(self, session_uid: str, session_name: str) -> list[Trace]: ...


class SessionBuffer:
    """Thread-safe in-memory trace storage (one process)."""

    def __init__(self) -> None:
        self._traces: dict[str, list[Trace]] = defaultdict(list)
        self._lock = threading.Lock()

    def add_trace(self, session_uid_chain: list[str], session_name: str, trace: Trace) -> None:
        with self._lock:
            for uid in session_uid_chain:
                self._traces[uid].append(trace)

    def get_traces(self, session_uid: str, session_name: str) -> list[Trace]:
        with self._lock:
            return list(self._traces.get(session_uid, ()))

    def clear(self, session_uid: str, session_name: str) -> None:
        with self._lock:
            self._traces.pop(session_uid, None)

    def __repr__(self) -> str:
        with self._lock:
            return f"SessionBuffer(sessions={len(self._traces)}, traces={sum(map(len, self._traces.values()))})"

"""rLLM v0.2's `ContextVarSession` (the SDK's default session): a `with` block whose LLM calls are recorded.

Sessions nest: an inner session inherits the outer one's metadata (its own keys win) and, unless given a name, its
name; an outer session's `llm_calls` include its inner sessions' calls. The state lives in contextvars, so threads
and asyncio tasks each see their own session (a task started inside a session inherits it).

Through rllm's gateway, each innermost session is one gateway session (its `_uid` is the gateway's session id): one
conversation, whose turns the gateway keeps token-exact (`rllm.sdk.chat`).
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Callable
from typing import Any

from rllm.compat.sdk.protocol import StepView, Trace, trace_to_step_view
from rllm.compat.sdk.session.session_buffer import SessionBuffer

__all__ = [
    "ContextVarSession",
    "get_active_cv_sessions",
    "get_current_cv_metadata",
    "get_current_cv_session",
    "get_current_cv_session_name",
]

_stack: contextvars.ContextVar[tuple[ContextVarSession, ...]] = contextvars.ContextVar("rllm_sdk_sessions", default=())


def get_active_cv_sessions() -> list[ContextVarSession]:
    """The active sessions, outermost first."""
    return list(_stack.get())


def get_current_cv_session() -> ContextVarSession | None:
    stack = _stack.get()
    return stack[-1] if stack else None


def get_current_cv_session_name() -> str | None:
    current = get_current_cv_session()
    return current.name if current is not None else None


def get_current_cv_metadata() -> dict[str, Any]:
    """The metadata of the active sessions, merged outermost first (inner keys win); {} outside any."""
    merged: dict[str, Any] = {}
    for session in _stack.get():
        merged.update(session.metadata)
    return merged


class ContextVarSession:
    """A session: `with ContextVarSession(**metadata) as s: ...`, then `s.llm_calls` (traces) and `s.steps`
    (StepViews). `formatter` and `persistent_tracers` are accepted as in rLLM and not used."""

    def __init__(
        self,
        name: str | None = None,
        formatter: Callable[[dict], dict] | None = None,
        persistent_tracers: list | None = None,
        **metadata: Any,
    ) -> None:
        parent = get_current_cv_session()
        self.name = name or (parent.name if parent is not None else f"sess_{uuid.uuid4().hex[:16]}")
        self._uid = f"ctx_{uuid.uuid4().hex[:16]}"
        self._session_uid_chain = [*(parent._session_uid_chain if parent is not None else []), self._uid]
        self.metadata = metadata
        self.formatter = formatter or (lambda trace: trace)
        self.storage = SessionBuffer()
        self._persistent_tracers = persistent_tracers or []
        self._tokens: list[contextvars.Token] = []

    @property
    def llm_calls(self) -> list[Trace]:
        """This session's calls and its inner sessions', in the order they returned."""
        return self.storage.get_traces(self._uid, self.name)

    @property
    def steps(self) -> list[StepView]:
        return [trace_to_step_view(trace) for trace in self.llm_calls]

    def clear_calls(self) -> None:
        self.storage.clear(self._uid, self.name)

    def __enter__(self) -> ContextVarSession:
        self._tokens.append(_stack.set((*_stack.get(), self)))
        return self

    def __exit__(self, *exc_info: object) -> bool:
        _stack.reset(self._tokens.pop())
        return False

    def __len__(self) -> int:
        return len(self.llm_calls)

    def __repr__(self) -> str:
        return (
            f"ContextVarSession(name={self.name!r}, _uid={self._uid!r}, "
            f"chain_depth={len(self._session_uid_chain)}, storage={self.storage!r})"
        )

"""rLLM v0.2's SDK sessions. rllm has rLLM's default backend, contextvars (`SESSION_BACKEND = "contextvar"`); the
OpenTelemetry backend's names (`otel_session`, `OpenTelemetrySession`) import and raise on use."""

from __future__ import annotations

from typing import Any

from rllm.compat.sdk.session.base import SessionProtocol, wrap_with_session_context
from rllm.compat.sdk.session.contextvar import (
    ContextVarSession,
    get_active_cv_sessions,
    get_current_cv_metadata,
    get_current_cv_session,
    get_current_cv_session_name,
)
from rllm.compat.sdk.session.opentelemetry import OpenTelemetrySession, otel_session
from rllm.compat.sdk.session.session_buffer import SessionBuffer, SessionBufferProtocol

__all__ = [
    "SESSION_BACKEND",
    "ContextVarSession",
    "OpenTelemetrySession",
    "SessionBuffer",
    "SessionBufferProtocol",
    "SessionContext",
    "SessionProtocol",
    "get_active_session_uids",
    "get_current_metadata",
    "get_current_session",
    "get_current_session_name",
    "otel_session",
    "wrap_with_session_context",
]

SESSION_BACKEND = "contextvar"
SessionContext = ContextVarSession


def get_current_session() -> ContextVarSession | None:
    return get_current_cv_session()


def get_current_session_name() -> str | None:
    return get_current_cv_session_name()


def get_current_metadata() -> dict[str, Any]:
    return get_current_cv_metadata()


def get_active_session_uids() -> list[str]:
    """The active sessions' uids, outermost first."""
    return [session._uid for session in get_active_cv_sessions()]

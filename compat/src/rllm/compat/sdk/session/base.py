"""rLLM v0.2's session protocol and runtime helpers."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from rllm.compat.sdk.session.contextvar import ContextVarSession

__all__ = ["SessionProtocol", "wrap_with_session_context"]


@runtime_checkable
class SessionProtocol(Protocol):
    name: str
    metadata: dict[str, Any]

    @property
    def llm_calls(self) -> list[Any]: ...

    def clear_calls(self) -> None: ...

    def __enter__(self) -> SessionProtocol: ...

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> bool: ...


def _ensure_tracer_initialized(service_name: str | None = None) -> None:
    """rLLM configures its OpenTelemetry tracer here when that backend is chosen; the contextvar backend (rLLM's
    default, and the only one here) needs nothing, so this does nothing, as in rLLM."""


def wrap_with_session_context(agent_func: Callable, *, tracer_service_name: str | None = None) -> Callable:
    """`agent_func` run inside a session: the wrapper takes `(metadata, *args, **kwargs)` (a `session_name` in the
    metadata names the session) and returns `(output, session uid)`."""
    if inspect.iscoroutinefunction(agent_func):

        async def wrapped(metadata: dict, *args: Any, **kwargs: Any) -> tuple[Any, str]:
            metadata = dict(metadata)
            with ContextVarSession(name=metadata.pop("session_name", None), **metadata) as session:
                output = await agent_func(*args, **kwargs)
            return output, session._uid

        return wrapped

    def wrapped_sync(metadata: dict, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        metadata = dict(metadata)
        with ContextVarSession(name=metadata.pop("session_name", None), **metadata) as session:
            output = agent_func(*args, **kwargs)
        return output, session._uid

    return wrapped_sync

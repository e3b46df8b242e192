"""rLLM v0.2's OpenTelemetry session backend (sessions carried across processes in W3C baggage). rllm has the
contextvar backend only: these names import, and using them raises, naming what to use."""

from __future__ import annotations

from typing import Any

from rllm.compat.sdk._unavailable import SDKFeatureUnavailable, unavailable_class

__all__ = [
    "OpenTelemetrySession",
    "configure_default_tracer",
    "get_active_otel_session_uids",
    "get_current_otel_metadata",
    "get_current_otel_session_name",
    "otel_session",
]

_INSTEAD = (
    "use the contextvar sessions (rllm.sdk.session(), the default backend); across processes, give each process "
    "its gateway session URL (<gateway URL>/sessions/<id>/v1) as its base_url"
)
OpenTelemetrySession = unavailable_class("OpenTelemetrySession", "OpenTelemetry session backend", _INSTEAD)


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise SDKFeatureUnavailable(f"rLLM's OpenTelemetry session backend is not part of rllm; {_INSTEAD}")


otel_session = configure_default_tracer = _refuse
get_current_otel_metadata = get_current_otel_session_name = get_active_otel_session_uids = _refuse

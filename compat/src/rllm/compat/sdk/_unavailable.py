"""The error for rLLM SDK parts that rllm does not have (its OpenTelemetry backend, its LiteLLM proxy and the SQLite
stores behind it): the names import, and using one raises, naming what does the job here."""

from __future__ import annotations

from typing import Any

from rllm.errors import RllmError

__all__ = ["GATEWAY", "SDKFeatureUnavailable", "unavailable_class"]

GATEWAY = (
    "serve the model with rllm's gateway (`rllm serve gateway`, or `await rllm.gateway.Gateway(model).start()`) and "
    "give get_chat_client(base_url=<gateway URL>/v1) to the agent: each session's calls come back with their exact "
    "token ids (session.llm_calls, GET <gateway URL>/sessions/<id>/calls)"
)


class SDKFeatureUnavailable(RllmError):
    """An rLLM SDK feature that rllm does not have; the message names what to use."""


def unavailable_class(name: str, what: str, instead: str = GATEWAY) -> type:
    """A class named `name` whose construction raises `SDKFeatureUnavailable`."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise SDKFeatureUnavailable(f"{name}: rLLM's {what} is not part of rllm; {instead}")

    return type(name, (), {"__init__": __init__, "__doc__": f"rLLM's {what}: not available here (raises on use)."})

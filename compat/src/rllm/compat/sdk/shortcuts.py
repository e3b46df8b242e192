"""rLLM v0.2's SDK shortcuts: `session(**metadata)`, `get_chat_client(...)`, `get_chat_client_async(...)`.

    client = get_chat_client(base_url="http://127.0.0.1:8090/v1", api_key="none")   # rllm serve gateway --port 8090
    with session(task_id="t1") as s:
        reply = client.chat.completions.create(model="policy", messages=[...])
    s.steps[0].output["output_token_ids"]        # the sampled ids, exactly

See `rllm.sdk.chat.openai` for where the calls go and how they are recorded.
"""

from __future__ import annotations

from typing import Any

from rllm.compat.sdk.chat.openai import AsyncTrackedChatClient, TrackedChatClient
from rllm.compat.sdk.session import ContextVarSession

__all__ = ["get_chat_client", "get_chat_client_async", "session"]


def _session_with_name(name: str | None = None, **metadata: Any) -> ContextVarSession:
    """A session with an explicit name (rLLM's internal helper)."""
    return ContextVarSession(name=name, **metadata)


def session(**metadata: Any) -> ContextVarSession:
    """A session context (`with session(**metadata) as s:`); its name is generated (or inherited from the session
    around it), its metadata goes with every call recorded in it."""
    if "name" in metadata:
        raise ValueError("session(): the name is generated and cannot be given")
    return ContextVarSession(**metadata)


def get_chat_client(provider: str = "openai", *, use_proxy: bool = True, **kwargs: Any) -> TrackedChatClient:
    """An `openai.OpenAI` whose chat completions are recorded in the active sessions; `kwargs` go to `OpenAI`."""
    _check_provider(provider)
    metadata = kwargs.pop("metadata", None)
    return TrackedChatClient(use_proxy=use_proxy, trace_metadata=metadata, **kwargs)


def get_chat_client_async(provider: str = "openai", *, use_proxy: bool = True, **kwargs: Any) -> AsyncTrackedChatClient:
    """The `openai.AsyncOpenAI` of `get_chat_client`."""
    _check_provider(provider)
    metadata = kwargs.pop("metadata", None)
    return AsyncTrackedChatClient(use_proxy=use_proxy, trace_metadata=metadata, **kwargs)


def _check_provider(provider: str) -> None:
    if provider.lower() != "openai":
        raise ValueError(f"Unsupported chat provider '{provider}'. Only 'openai' is supported.")

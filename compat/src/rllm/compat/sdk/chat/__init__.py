"""rLLM v0.2's tracked chat clients (`rllm.sdk.chat.openai`), over rllm's gateway."""

from rllm.compat.sdk.chat.openai import (
    AsyncOpenTelemetryTrackedChatClient,
    AsyncProxyTrackedChatClient,
    AsyncTrackedChatClient,
    OpenTelemetryTrackedAsyncChatClient,
    OpenTelemetryTrackedChatClient,
    ProxyTrackedAsyncChatClient,
    ProxyTrackedChatClient,
    TrackedAsyncChatClient,
    TrackedChatClient,
)

__all__ = [
    "AsyncOpenTelemetryTrackedChatClient",
    "AsyncProxyTrackedChatClient",
    "AsyncTrackedChatClient",
    "OpenTelemetryTrackedAsyncChatClient",
    "OpenTelemetryTrackedChatClient",
    "ProxyTrackedAsyncChatClient",
    "ProxyTrackedChatClient",
    "TrackedAsyncChatClient",
    "TrackedChatClient",
]

"""rLLM v0.2's LiteLLM proxy managers: not part of rllm (see `rllm.sdk.proxy`)."""

from rllm.compat.sdk._unavailable import unavailable_class

__all__ = ["ProxyManager", "VerlProxyManager"]

ProxyManager = unavailable_class("ProxyManager", "LiteLLM proxy")
VerlProxyManager = unavailable_class("VerlProxyManager", "LiteLLM proxy in front of verl's vLLM servers")

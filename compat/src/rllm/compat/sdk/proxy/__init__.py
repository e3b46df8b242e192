"""rLLM v0.2's LiteLLM proxy (`ProxyManager`, `VerlProxyManager`): not part of rllm. The names import; using them
raises, naming rllm's gateway (`rllm serve gateway`), which does the proxy's job: an OpenAI-compatible server whose
per-session calls are recorded with their exact token ids."""

from rllm.compat.sdk.proxy.proxy_manager import ProxyManager, VerlProxyManager

__all__ = ["ProxyManager", "VerlProxyManager"]

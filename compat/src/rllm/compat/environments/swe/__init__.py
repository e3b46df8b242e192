"""rLLM v0.2's `rllm.environments.swe`: `SWEEnv` over rllm's Docker-free SWE environment (see `swe.py`)."""

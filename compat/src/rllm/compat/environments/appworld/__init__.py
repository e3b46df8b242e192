"""rLLM v0.2's `rllm.environments.appworld`: `AppWorldEnv` (needs the `appworld` library) and `signal_patch`."""

"""rLLM v0.2's `rllm.environments.browsergym`: `BrowserGymEnv` over rllm's MiniWoB++ web environment."""

"""Web environments: MiniWoB++ in a real headless Chromium (rllm.envs.web.env.WebEnv), its browsers
(rllm.envs.web.browser), its actions (rllm.envs.web.actions) and its task pages (rllm.envs.web.miniwob)."""

from __future__ import annotations

from rllm.envs.web.env import WebEnv, observation_text

__all__ = ["WebEnv", "observation_text"]

"""Environments: `BaseEnv`, reusable environments (answer feedback, tools/MCP; one file each) and `check_env`.

The environments of built-in tasks live with their task in `rllm.tasks`."""

from __future__ import annotations

from rllm.envs.base import BaseEnv
from rllm.envs.checker import check_env

__all__ = ["BaseEnv", "check_env"]

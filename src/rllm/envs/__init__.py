"""Environments: `BaseEnv`, reusable environments (answer feedback, tools/MCP; one file each) and `check_env`.

The environments of built-in tasks live with their task in `rllm.tasks`."""

from __future__ import annotations

from typing import Any

from rllm.envs.base import BaseEnv

__all__ = ["BaseEnv", "check_env"]


def __getattr__(name: str) -> Any:
    if name == "check_env":
        from rllm.envs.checker import check_env

        return check_env
    raise AttributeError(name)

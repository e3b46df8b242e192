"""Registry of built-in tasks: which agent and environment play a task, and how its dataset rows are made.

Entries name their classes by import path so that looking one up imports only what that task needs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from rllm.errors import RllmError

__all__ = ["BUILTIN_TASKS", "BuiltinTask", "UnknownTaskError", "get_builtin_task"]


class UnknownTaskError(RllmError, ValueError):
    """No built-in task has that name."""


@dataclass(frozen=True)
class BuiltinTask:
    name: str
    description: str
    agent_path: str  # "module:Class"
    env_path: str
    make_tasks_path: str  # "module:function(n, *, seed) -> list[dict]"

    @property
    def agent_class(self) -> type:
        return _load(self.agent_path)

    @property
    def env_class(self) -> type:
        return _load(self.env_path)

    def make_tasks(self, n: int, *, seed: int = 0, **kwargs: Any) -> list[dict]:
        return _load(self.make_tasks_path)(n, seed=seed, **kwargs)


BUILTIN_TASKS: dict[str, BuiltinTask] = {
    "arithmetic": BuiltinTask(
        name="arithmetic",
        description="Answer a generated multiplication question (single-turn); reward 1 for the right number.",
        agent_path="rllm.agents.arithmetic:ArithmeticAgent",
        env_path="rllm.envs.arithmetic:ArithmeticEnv",
        make_tasks_path="rllm.envs.arithmetic:make_arithmetic_tasks",
    ),
    "frozenlake": BuiltinTask(
        name="frozenlake",
        description="Walk a generated FrozenLake grid to the goal without falling in a hole (multi-turn).",
        agent_path="rllm.agents.frozenlake:FrozenLakeAgent",
        env_path="rllm.envs.frozenlake:FrozenLakeEnv",
        make_tasks_path="rllm.envs.frozenlake:make_frozenlake_tasks",
    ),
}


def get_builtin_task(name: str) -> BuiltinTask:
    try:
        return BUILTIN_TASKS[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_TASKS))
        raise UnknownTaskError(f"unknown task {name!r}; built-in tasks: {known}") from None


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)

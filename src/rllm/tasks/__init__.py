"""Built-in tasks, one file each, and their registry.

A task file (`rllm/tasks/<name>.py`, or a package `rllm/tasks/<name>/` for a big task: swe, web) holds everything
about one task: its generator (`make_tasks(n, *, seed)` -> dataset rows), its prompt, what plays it (an agent and an
environment for the `agent_env` workflow, and/or a prompt and a reward function for the `single_turn` and
`solver_judge` workflows) and which scoring function of `rllm.rewards` rewards it. It ends with `TASK = Task(...)`.

`REGISTRY` maps each task's name to its module, one line a task: a new task is one new file plus one line here.
Modules are imported only when their task is looked up (`get_task`), so `import rllm.tasks` stays light and using
one task never imports another's dependencies. Code outside this package registers a task at run time with
`REGISTRY["name"] = "package.module"`.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rllm.errors import RllmError

__all__ = ["HUBS", "REGISTRY", "Task", "UnknownTaskError", "get_task", "is_task_name", "task_names"]

# task name -> the module whose TASK it is
REGISTRY: dict[str, str] = {
    "arithmetic": "rllm.tasks.arithmetic",
    "code": "rllm.tasks.code",
    "countdown": "rllm.tasks.countdown",
    "frozenlake": "rllm.tasks.frozenlake",
    "humaneval": "rllm.tasks.humaneval",
    "math": "rllm.tasks.math",
    "mcp_kb": "rllm.tasks.mcp_kb",
    "shapes": "rllm.tasks.shapes",
    "swe": "rllm.tasks.swe",
    "web": "rllm.tasks.web",
}


class UnknownTaskError(RllmError, ValueError):
    """No task has that name, or the task lacks what was asked of it (e.g. an agent class)."""


@dataclass(frozen=True)
class Task:
    """One task: how its dataset rows are made and what plays it.

    `make_tasks(n, *, seed=0, **kwargs)` returns `n` rows, the same for the same seed; `kwargs` come from the config's
    `data.task_args`. `agent`/`env` play it in the `agent_env` workflow; `prompt_fn(task) -> str` and
    `reward_fn(task, response) -> float | RewardOutput` go to prompt/reward workflows (`single_turn`, ...).
    `default_workflow` plays it when the caller names neither a workflow nor an agent and env.
    """

    name: str
    description: str
    make_tasks: Callable[..., list[dict]]
    agent: type | None = None
    env: type | None = None
    prompt_fn: Callable[[dict], str] | None = None
    reward_fn: Callable[[dict, Any], Any] | None = None
    default_workflow: str = "agent_env"

    @property
    def agent_class(self) -> type:
        return self._need(self.agent, "agent class")

    @property
    def env_class(self) -> type:
        return self._need(self.env, "environment class")

    def workflow_inputs(self, reward_args: dict[str, Any] | None = None) -> dict[str, Any]:
        """The prompt and reward functions that prompt/reward workflows (single_turn, solver_judge) take;
        `reward_args` are keyword arguments bound to the reward function (e.g. a format reward)."""
        inputs: dict[str, Any] = {}
        if self.prompt_fn is not None:
            inputs["prompt_fn"] = self.prompt_fn
        if self.reward_fn is not None:
            inputs["reward_fn"] = functools.partial(self.reward_fn, **reward_args) if reward_args else self.reward_fn
        elif reward_args:
            raise ValueError(f"task {self.name!r} has no reward function to take reward_args {sorted(reward_args)}")
        return inputs

    def _need(self, value: type | None, what: str) -> type:
        if value is None:
            raise UnknownTaskError(
                f"task {self.name!r} has no {what}; play it with a workflow (e.g. workflow: {self.default_workflow})"
            )
        return value


# environment hubs: "prefix:name" (e.g. "reasoning_gym:leg_counting") -> the module whose `hub_task(name)` builds it
HUBS: dict[str, str] = {
    "openenv": "rllm.tasks.hubs.openenv",
    "reasoning_gym": "rllm.tasks.hubs.reasoning_gym",
    "skyrl_gym": "rllm.tasks.hubs.skyrl_gym",
    "textarena": "rllm.tasks.hubs.textarena",
    "verifiers": "rllm.tasks.hubs.verifiers",
}


def task_names() -> tuple[str, ...]:
    """The built-in tasks' names, sorted; read from `REGISTRY` at each call, so a task registered at run time is
    listed."""
    return tuple(sorted(REGISTRY))


def get_task(name: str) -> Task:
    """The task called `name`: a built-in task (importing its module and no other task's), a catalog benchmark
    (`rllm.tasks.catalog`), a hub's environment named "hub:name", or a directory of Harbor task folders
    (`rllm.tasks.harbor`)."""
    if name not in REGISTRY:
        return _catalog_or_hub_task(name)
    module = importlib.import_module(REGISTRY[name])
    task = getattr(module, "TASK", None)
    if not isinstance(task, Task) or task.name != name:
        raise UnknownTaskError(
            f"{module.__name__} must define TASK = Task(name={name!r}, ...): the registry names it for task {name!r}"
        )
    return task


def _catalog_or_hub_task(name: str) -> Task:
    if _is_harbor_dir(name):
        from rllm.tasks.harbor import harbor_task

        return harbor_task(name)
    hub, colon, env = name.partition(":")
    if colon:
        if hub not in HUBS:
            raise UnknownTaskError(
                f"unknown environment hub {hub!r} in {name!r}{_close(hub, HUBS)}; hubs: {', '.join(HUBS)}"
            )
        return importlib.import_module(HUBS[hub]).hub_task(env)
    from rllm.tasks.catalog import CATALOG
    from rllm.tasks.catalog.task import benchmark_task

    if name in CATALOG:
        return benchmark_task(CATALOG[name])
    raise UnknownTaskError(
        f"unknown task {name!r}{_close(name, [*REGISTRY, *CATALOG])}; built-in tasks: {', '.join(sorted(REGISTRY))}; "
        "benchmarks: `rllm datasets list`; environment hubs: " + ", ".join(f"{hub}:NAME" for hub in HUBS)
    )


def _close(name: str, names: Any) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def is_task_name(name: str) -> bool:
    """Whether `name` names a task: built-in, a catalog benchmark, "hub:name" of a known hub (the hub checks
    the name when the task is built), or a directory holding Harbor task folders."""
    from rllm.tasks.catalog import CATALOG

    hub = ":" in name and name.partition(":")[0] in HUBS
    return name in REGISTRY or name in CATALOG or hub or _is_harbor_dir(name)


def _is_harbor_dir(name: str) -> bool:
    """A directory with task.toml in it or in its sub-folders (rllm.tasks.harbor, imported only for a directory)."""
    if not name or not os.path.isdir(name):
        return False
    from rllm.tasks.harbor import is_harbor_dir

    return is_harbor_dir(name)

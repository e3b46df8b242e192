"""Which workflow plays a task, with which arguments: one rule for `rllm train`, `rllm eval` and `AgentTrainer`.

- An explicit workflow (a class, a built-in name, or `"package.module:Class"`) wins; otherwise explicit agent and
  env classes mean the agent/env loop; otherwise the built-in task's own default workflow.
- `agent_env` takes the agent and env classes given, else the task's; `reward_args` go to the env as
  `env_args["reward_args"]` (FeedbackEnv binds them to its reward function).
- Any other workflow gets the task's `prompt_fn` / `reward_fn` for the parameters its `__init__` declares (so a
  custom workflow that takes `reward_fn` is handed the task's, with `reward_args` bound to it), then the explicit
  `workflow_args`, which win.
- A `workflow_args` key the workflow's `__init__` does not take is refused here, naming the key, the workflow and
  what it takes, instead of a TypeError from deep inside the engine at the first rollout (switching a config's
  `workflow` keeps its `workflow_args`: math's single-turn `system_prompt` is not an argument of `agent_env`).
- `check_config_args` does the same for a config's `agent_args` and `env_args` once the tasks exist (an env takes
  its keywords, and a task row's keys, through `from_dict`), with `rllm.arguments`' rule for classes that take
  `**kwargs`; `data.task_args` is checked where the tasks are made (`DataConfig.make_tasks`).
"""

from __future__ import annotations

import inspect
from typing import Any

from rllm.arguments import UnknownArgumentError, accepted_keywords, check_keywords, did_you_mean
from rllm.workflows import get_workflow
from rllm.workflows.agent_env import AgentEnvWorkflow
from rllm.workflows.base import Workflow

__all__ = ["WorkflowArgsError", "check_config_args", "resolve_workflow", "workflow_for_config"]


class WorkflowArgsError(UnknownArgumentError):
    """`workflow_args` has a key the workflow does not take."""


def resolve_workflow(
    task_spec: Any = None,
    *,
    workflow: str | type[Workflow] | None = None,
    workflow_args: dict[str, Any] | None = None,
    agent_class: type | None = None,
    env_class: type | None = None,
    agent_args: dict[str, Any] | None = None,
    env_args: dict[str, Any] | None = None,
    max_steps: int = 10,
    step_timeout: float | None = None,
    reward_args: dict[str, Any] | None = None,
) -> tuple[type[Workflow], dict[str, Any]]:
    """(workflow class, its keyword arguments); `task_spec` is a `rllm.tasks.Task` or None."""
    if workflow is None:
        if agent_class is not None and env_class is not None:
            workflow = "agent_env"
        elif task_spec is not None:
            workflow = task_spec.default_workflow
        else:
            raise ValueError("nothing plays the task: give workflow_class, agent_class + env_class, or a built-in task")
    workflow_class = get_workflow(workflow) if isinstance(workflow, str) else workflow
    if workflow_class is AgentEnvWorkflow:
        args = {
            "agent_class": agent_class or task_spec.agent_class,
            "env_class": env_class or task_spec.env_class,
            "agent_args": dict(agent_args or {}),
            "env_args": {**({"reward_args": reward_args} if reward_args else {}), **(env_args or {})},
            "max_steps": max_steps,
            "step_timeout": step_timeout,
        }
        _check_workflow_args(workflow_class, workflow_args)
        return workflow_class, {**args, **(workflow_args or {})}
    inputs = task_spec.workflow_inputs(reward_args) if task_spec is not None else {}
    accepted = inspect.signature(workflow_class.__init__).parameters
    _check_workflow_args(workflow_class, workflow_args)
    return workflow_class, {**{k: v for k, v in inputs.items() if k in accepted}, **(workflow_args or {})}


def _check_workflow_args(workflow_class: type, workflow_args: dict[str, Any] | None) -> None:
    parameters = inspect.signature(workflow_class.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return  # it takes any keyword: its own __init__ decides
    takes = [name for name in parameters if name != "self"]
    unknown = sorted(set(workflow_args or {}) - set(takes))
    if unknown:
        hint = did_you_mean(unknown[0], takes, "workflow_args")
        raise WorkflowArgsError(
            f"workflow_args {unknown}: {workflow_class.__name__}.__init__ takes no such argument{hint} (it takes "
            f"{takes}); remove them (e.g. workflow_args={{}} on the command line when switching a config's workflow)"
        )


def check_config_args(config: Any, workflow_class: type, workflow_args: dict[str, Any], tasks: list[dict]) -> None:
    """Refuse a key of `config.agent_args` / `config.env_args` that the agent / env the resolved agent/env workflow
    builds does not take (module docstring), before any model loads: `UnknownArgumentError` naming the key, the
    closest valid names and all of them. Other workflows get neither, so there is nothing to check."""
    agent_class, env_class = workflow_args.get("agent_class"), workflow_args.get("env_class")
    if not issubclass(workflow_class, AgentEnvWorkflow) or agent_class is None or env_class is None:
        return
    agent_keywords = accepted_keywords(agent_class)
    check_keywords(config.agent_args, agent_keywords, setting="agent_args", goes_to=agent_class.__name__)
    env_keywords = accepted_keywords(env_class) if _from_dict_is_ours(env_class) else None
    if env_keywords is not None:  # a row's keys reach the env too: the env_args are their defaults
        env_keywords = (env_keywords - {"task"}) | {key for task in tasks[:64] for key in task}
    check_keywords(config.env_args, env_keywords, setting="env_args", goes_to=env_class.__name__)


def _from_dict_is_ours(env_class: type) -> bool:
    """Whether `env_class.from_dict` is one rllm ships. Those pass what they read on to `__init__` (the check above
    relies on it); a user's own `from_dict` may read any key of the row, so its env_args cannot be checked."""
    owner = next((k for k in env_class.__mro__ if "from_dict" in vars(k)), None)
    return owner is not None and owner.__module__.split(".")[0] == "rllm"


def workflow_for_config(
    config: Any,
    *,
    workflow_class: str | type[Workflow] | None = None,
    workflow_args: dict[str, Any] | None = None,
    agent_class: type | None = None,
    env_class: type | None = None,
    agent_args: dict[str, Any] | None = None,
    env_args: dict[str, Any] | None = None,
) -> tuple[type[Workflow], dict[str, Any]]:
    """`resolve_workflow` for a `TrainConfig` (the one rule of `rllm train`, `rllm eval` and `AgentTrainer`): explicit
    classes win over `config.workflow`, which wins over the built-in task's own; explicit arguments win over the
    config's. The task `config.data.task` is consulted only when the caller did not say what plays it."""
    from rllm.tasks import get_task

    explicit = workflow_class is not None or (agent_class is not None and env_class is not None)
    return resolve_workflow(
        None if explicit else get_task(config.data.task),
        workflow=workflow_class or config.workflow,
        workflow_args={**config.workflow_args, **(workflow_args or {})},
        agent_class=agent_class,
        env_class=env_class,
        agent_args={**config.agent_args, **(agent_args or {})},
        env_args={**config.env_args, **(env_args or {})},
        max_steps=config.rollout.max_steps,
        step_timeout=config.rollout.step_timeout,
        reward_args=config.data.reward_args,
    )

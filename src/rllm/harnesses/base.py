"""What a harness is given (`HarnessJob`), how a name finds one (`get_harness`), and how it becomes the workflow
that plays a task (`harness_workflow`, `workflow_for_config`). See the package docstring.

Choices:

- Two task shapes fit. A prompt task has one instruction and one reward (`Task.prompt_fn`, `Task.reward_fn`:
  arithmetic, countdown, math, code): the agent program decides the turns, the task scores its answer. A workspace
  task (swe) has an environment that runs commands and grades what they did (`run_command`,
  `compute_final_reward`): per episode its env is opened (`from_dict(task)`, `reset()` gives the instruction), handed
  to the harness as `job.workspace` (the `Workspace` protocol), graded when the harness returns (the reward is the
  env's grade, correct when it says resolved), and closed, whatever happened. A harness says which it plays: the
  built-ins in `WORKSPACE_HARNESSES` (bash, mini-swe-agent), or a function with `needs_workspace = True`, work in
  a workspace; the others play prompt tasks. Any other pairing, or a task played by its environment step by step
  (frozenlake, web), is refused in one line naming what fits.
- Tools: `agent_args.tools`, names of `rllm.tools.BUILTIN_TOOLS` (`[calculator]`), registered with the harness's
  framework as function tools; each call runs through `ToolRegistry.call` (argument checks, a time limit, errors as
  text the model reads), whatever the framework.
- Turns: `rollout.max_steps` is the most model calls a harness makes (`job.max_turns`); each harness hands it to
  its framework's own limit, and an agent past it ends its episode as `max_turns` (`turn_limit`), with no reward
  (a workspace task's too: the grade is of a finished run). The rest of
  `agent_args` is the harness's (`instructions`, the system prompt; see each harness).
- One name, one harness: `agent` and `workflow` in one config are refused, as two answers to what plays the task.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rllm.errors import RllmError
from rllm.gateway.rollout import RolloutWorkflow, run_in_thread
from rllm.rewards.base import RewardOutput, to_reward_output
from rllm.tools.base import Tool, ToolRegistry
from rllm.tools.builtin import BUILTIN_TOOLS
from rllm.types import TerminationReason
from rllm.workflows.resolve import workflow_for_config as _workflow_for_config
from rllm.workflows.runtime import TerminationEvent

__all__ = [
    "HARNESSES",
    "WORKSPACE_HARNESSES",
    "HarnessError",
    "HarnessJob",
    "HarnessWorkflow",
    "Workspace",
    "get_harness",
    "harness_workflow",
    "needs_workspace",
    "turn_limit",
    "workflow_for_config",
    "workspace_env",
]

# name -> "module:function"; each module imports its framework at import time, so only a named one is imported
HARNESSES: dict[str, str] = {
    "react": "rllm.harnesses.react:react",
    "openai-agents": "rllm.harnesses.openai_agents:openai_agents",
    "anthropic": "rllm.harnesses.anthropic_loop:anthropic_loop",
    "langgraph": "rllm.harnesses.langgraph:langgraph",
    "smolagents": "rllm.harnesses.smolagents:smolagents_agent",
    "codex-cli": "rllm.harnesses.codex_cli:codex_cli",
    "bash": "rllm.harnesses.bash:bash",
    "mini-swe-agent": "rllm.harnesses.mini_swe_agent:mini_swe_agent",
    "oracle": "rllm.harnesses.oracle:OracleWorkflow",  # a task's own solution, no model (Harbor task folders)
}
# the built-ins that work in a task's workspace (`HarnessJob.workspace`); the others play prompt tasks
WORKSPACE_HARNESSES = frozenset({"bash", "mini-swe-agent"})
EXTRA_HINT = "pip install 'rllm[harnesses]' (make install does)"


class HarnessError(RllmError):
    """A harness that cannot be found, cannot be imported, or does not fit the task."""


class Workspace(Protocol):
    """What a workspace harness works in (`HarnessJob.workspace`): the task's environment, opened for the episode
    (`rllm.tasks.swe.SWEEnv`: a repository at /testbed in rllm's sandbox, no network). Every command the agent runs
    goes through it; what the commands leave behind is what the task grades."""

    def run_command(self, command: str) -> str:
        """Run one bash command (a fresh shell in the workspace, with the task's time limit and output cap) and
        return its output, stdout and stderr together, ending in a line `[exit code N]` when it failed. Failures
        are told as text, never raised."""
        ...


@dataclass
class HarnessJob:
    """One episode, as a harness sees it. `base_url` serves chat completions, the Responses API and the Anthropic
    Messages API (`rllm.gateway.server`); `model` is the name to send (the gateway serves its own model whatever
    the name). On a workspace task `instruction` is its env's first observation and `workspace` the env."""

    task: dict
    base_url: str
    instruction: str
    tools: list[Tool] = field(default_factory=list)
    max_turns: int = 8
    args: dict[str, Any] = field(default_factory=dict)
    model: str = "policy"
    output: dict[str, str] = field(default_factory=dict)  # what the program printed (stdout, stderr): kept
    workspace: Workspace | None = None  # a workspace task's env, for a workspace harness; None on prompt tasks

    def __post_init__(self) -> None:
        self.registry = ToolRegistry(self.tools)

    @property
    def instructions(self) -> str | None:
        """The system prompt the harness gives its agent (`agent_args.instructions`), if any."""
        return self.args.get("instructions")

    def schemas(self) -> list[dict]:
        """The tools as OpenAI chat-completions function schemas."""
        return self.registry.schemas()

    async def run_tool(self, name: str, arguments: dict | str) -> str:
        """Run one tool call the model asked for; failures come back as text for the model, never raised."""
        return (await self.registry.call(name, arguments)).content


def turn_limit(job: HarnessJob, harness: str) -> TerminationEvent:
    """What a harness raises when its agent still wanted to act after `job.max_turns` model calls: the episode ends
    as `max_turns`, with the calls so far kept (and no reward: there is no answer to score)."""
    return TerminationEvent(
        TerminationReason.MAX_TURNS, f"the {harness} harness's agent still acted after {job.max_turns} model calls"
    )


def get_harness(name: str) -> Callable[[HarnessJob], Any]:
    """The harness a name means: a built-in (`HARNESSES`) or `package.module:function`."""
    target = HARNESSES.get(name, name)
    module_name, _, attribute = target.partition(":")
    if not attribute:
        raise HarnessError(
            f"unknown harness {name!r}: use one of {', '.join(HARNESSES)}, or your own as 'package.module:function'"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if name in HARNESSES:
            raise HarnessError(f"the {name!r} harness needs the {exc.name!r} package: {EXTRA_HINT}") from None
        raise HarnessError(f"harness {name!r}: cannot import {module_name!r} ({exc})") from None
    harness = getattr(module, attribute, None)
    if not callable(harness):
        raise HarnessError(f"harness {name!r}: {module_name} has no function {attribute!r}")
    return harness


class HarnessWorkflow(RolloutWorkflow):
    """A harness playing a task as a gateway rollout; `harness_workflow` makes one subclass per harness and task.
    Whatever the harness put in `job.output` (a program's stdout and stderr) is kept in `episode.info`, also when
    the episode fails. On a workspace task the env lives from `play` to `cleanup` (the engine's, after every
    attempt), so the grade in `score` sees what the agent left."""

    harness: Callable[[HarnessJob], Any]
    prompt_fn: Callable[[dict], str] | None = None  # a prompt task's instruction
    env_class: type | None = None  # a workspace task's env (prompt_fn is then None)
    tools: tuple[Tool, ...] = ()
    max_turns: int = 8
    harness_args: dict[str, Any] = {}  # noqa: RUF012 - set per subclass, never mutated
    _workspace: Any = None  # this attempt's open env

    async def play(self, task: dict, base_url: str) -> Any:
        cls = type(self)
        instruction = await self._instruction(task)
        job = HarnessJob(
            task,
            base_url,
            instruction,
            tools=list(cls.tools),
            max_turns=cls.max_turns,
            args=cls.harness_args,
            workspace=self._workspace,
        )
        try:
            return await run_in_thread(cls.harness, job)
        finally:
            if job.output:
                self.episode_info["harness_output"] = job.output

    async def score(self, task: dict, answer: Any) -> RewardOutput:
        """A workspace task's reward is its env's grade of what the agent left; a prompt task's, its reward_fn's."""
        if self._workspace is None:
            return await super().score(task, answer)
        return await self.call_env(_grade, self._workspace)

    async def cleanup(self) -> None:
        workspace, self._workspace = self._workspace, None
        try:
            await super().cleanup()
        finally:
            if workspace is not None:
                await self.call_env(workspace.close)

    async def _instruction(self, task: dict) -> str:
        """A prompt task's prompt, or a workspace task's first observation once its env is open (env calls block:
        they run on the engine's env threads, their failures are infra errors, retried)."""
        cls = type(self)
        if cls.env_class is None:
            return cls.prompt_fn(task)
        self._workspace = await self.call_env(cls.env_class.from_dict, task)
        observation, _ = await self.call_env(self._workspace.reset)
        return str(observation)


def _grade(workspace: Any) -> RewardOutput:
    """The env's grade as a reward: `compute_final_reward()`, correct when the env's grade says resolved (SWEEnv's
    `result`: partial credit is a reward, not a success), else when positive."""
    result = to_reward_output(workspace.compute_final_reward())
    grade = getattr(workspace, "result", None)
    if getattr(grade, "resolved", None) is None:
        return result
    return RewardOutput(
        result.reward, is_correct=bool(grade.resolved), info={**result.info, "grade": getattr(grade, "reason", "")}
    )


def harness_workflow(
    name: str,
    task_spec: Any,
    *,
    agent_args: dict[str, Any] | None = None,
    max_turns: int = 8,
) -> tuple[type[HarnessWorkflow], dict[str, Any]]:
    """(the workflow class that plays `task_spec` with harness `name`, its arguments)."""
    harness = get_harness(name)
    if isinstance(harness, type) and hasattr(harness, "for_task"):  # a workflow of its own: plays without a model
        return harness, harness.for_task(task_spec, dict(agent_args or {}))
    env_class = _fitting_env(name, harness, task_spec)
    args = dict(agent_args or {})
    attributes = {
        "harness": staticmethod(harness),
        "prompt_fn": None if env_class else staticmethod(task_spec.prompt_fn),
        "env_class": env_class,
        "tools": tuple(_builtin_tool(tool) for tool in args.pop("tools", [])),
        "max_turns": max_turns,
        "harness_args": args,
        "default_name": name,
        "__module__": __name__,
    }
    class_name = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name)) + "Harness"
    workflow_args = {} if env_class else {"reward_fn": task_spec.reward_fn}  # a workspace task's env grades
    return type(class_name, (HarnessWorkflow,), attributes), workflow_args


def needs_workspace(name: str, harness: Callable) -> bool:
    """Whether a harness works in a task's workspace: a built-in of `WORKSPACE_HARNESSES`, or a function of the
    user's with `needs_workspace = True`."""
    return name in WORKSPACE_HARNESSES or bool(getattr(harness, "needs_workspace", False))


def workspace_env(task_spec: Any) -> type | None:
    """A workspace task's env class (no prompt and reward functions; an env that runs commands and grades), or
    None."""
    env = task_spec.env
    if _is_prompt_task(task_spec) or env is None:
        return None
    runs_and_grades = all(callable(getattr(env, method, None)) for method in ("run_command", "compute_final_reward"))
    return env if runs_and_grades else None


def workflow_for_config(config: Any, **explicit: Any) -> tuple[type, dict[str, Any]]:
    """`rllm.workflows.resolve.workflow_for_config`, or, when the config names a harness (`agent`), that harness
    on the config's task. A workflow or agent/env classes given explicitly (to `AgentTrainer`) win over the config;
    explicit `agent_args` add to the config's."""
    plays = ("workflow_class", "agent_class", "env_class")
    if config.agent is None or any(explicit.get(key) is not None for key in plays):
        return _workflow_for_config(config, **explicit)
    if config.workflow is not None:
        raise HarnessError(
            f"the config names both agent={config.agent!r} and workflow={config.workflow!r}: one plays the task; "
            "drop one (agent=null or workflow=null on the command line)"
        )
    from rllm.tasks import get_task

    agent_args = {**config.agent_args, **(explicit.get("agent_args") or {})}
    return harness_workflow(
        config.agent, get_task(config.data.task), agent_args=agent_args, max_turns=config.rollout.max_steps
    )


def _builtin_tool(name: Any) -> Tool:
    if not isinstance(name, str) or name not in BUILTIN_TOOLS:
        raise HarnessError(f"agent_args.tools: {name!r} is not a built-in tool; use some of {sorted(BUILTIN_TOOLS)}")
    return BUILTIN_TOOLS[name]()


def _fitting_env(name: str, harness: Callable, task_spec: Any) -> type | None:
    """The env class a workspace harness works in, None for a prompt harness on a prompt task; any other pairing is
    refused, naming what fits."""
    env_class, task = workspace_env(task_spec), task_spec.name
    if needs_workspace(name, harness):
        if env_class is None:
            raise HarnessError(
                f"the {name!r} harness works in a task's workspace (an env that runs its commands) and task {task!r} "
                f"has none; workspace tasks: {', '.join(_fitting_tasks(workspace=True))}"
            )
        return env_class
    if env_class is not None:
        raise HarnessError(
            f"task {task!r} is played in a workspace (its env runs the agent's commands) and the {name!r} harness "
            f"plays one instruction and a reward; use a workspace harness: {', '.join(sorted(WORKSPACE_HARNESSES))}"
        )
    if not _is_prompt_task(task_spec):
        raise HarnessError(
            f"task {task!r} is played by its environment step by step, so no harness fits it; harnesses play tasks "
            f"with one instruction and a reward: {', '.join(_fitting_tasks(workspace=False))}; workspace harnesses "
            f"({', '.join(sorted(WORKSPACE_HARNESSES))}) play {', '.join(_fitting_tasks(workspace=True))}"
        )
    return None


def _is_prompt_task(task_spec: Any) -> bool:
    return task_spec.prompt_fn is not None and task_spec.reward_fn is not None


def _fitting_tasks(*, workspace: bool) -> list[str]:
    """The registered tasks of one shape: workspace tasks, or prompt tasks."""
    from rllm.tasks import REGISTRY, get_task

    fitting = []
    for name in sorted(REGISTRY):
        try:
            spec = get_task(name)
        except Exception:  # a task whose own dependencies are missing here: not one to suggest
            continue
        if (workspace_env(spec) is not None) if workspace else _is_prompt_task(spec):
            fitting.append(name)
    return fitting

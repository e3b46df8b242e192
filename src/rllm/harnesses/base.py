"""What a harness is given (`HarnessJob`), how a name finds one (`get_harness`), and how it becomes the workflow
that plays a task (`harness_workflow`, `workflow_for_config`). See the package docstring.

Choices:

- A harness fits a task that has one instruction and one reward (`Task.prompt_fn`, `Task.reward_fn`: arithmetic,
  countdown, math, code): the agent program decides the turns, the task scores its answer. A task played by its
  environment step by step (frozenlake, web, swe) is refused, naming the tasks that fit.
- Tools: `agent_args.tools`, names of `rllm.tools.BUILTIN_TOOLS` (`[calculator]`), registered with the harness's
  framework as function tools; each call runs through `ToolRegistry.call` (argument checks, a time limit, errors as
  text the model reads), whatever the framework.
- Turns: `rollout.max_steps` is the most model calls a harness makes (`job.max_turns`); each harness hands it to
  its framework's own limit, and an agent past it ends its episode as `max_turns` (`turn_limit`). The rest of
  `agent_args` is the harness's (`instructions`, the system prompt; see each harness).
- One name, one harness: `agent` and `workflow` in one config are refused, as two answers to what plays the task.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rllm.errors import RllmError
from rllm.gateway.rollout import RolloutWorkflow, run_in_thread
from rllm.tools.base import Tool, ToolRegistry
from rllm.tools.builtin import BUILTIN_TOOLS
from rllm.types import TerminationReason
from rllm.workflows.resolve import workflow_for_config as _workflow_for_config
from rllm.workflows.runtime import TerminationEvent

__all__ = [
    "HARNESSES",
    "HarnessError",
    "HarnessJob",
    "HarnessWorkflow",
    "get_harness",
    "harness_workflow",
    "turn_limit",
    "workflow_for_config",
]

# name -> "module:function"; each module imports its framework at import time, so only a named one is imported
HARNESSES: dict[str, str] = {
    "react": "rllm.harnesses.react:react",
    "openai-agents": "rllm.harnesses.openai_agents:openai_agents",
    "anthropic": "rllm.harnesses.anthropic_loop:anthropic_loop",
    "langgraph": "rllm.harnesses.langgraph:langgraph",
    "smolagents": "rllm.harnesses.smolagents:smolagents_agent",
    "codex-cli": "rllm.harnesses.codex_cli:codex_cli",
}
EXTRA_HINT = "pip install 'rllm[harnesses]' (make install does)"


class HarnessError(RllmError):
    """A harness that cannot be found, cannot be imported, or does not fit the task."""


@dataclass
class HarnessJob:
    """One episode, as a harness sees it. `base_url` serves chat completions, the Responses API and the Anthropic
    Messages API (`rllm.gateway.server`); `model` is the name to send (the gateway serves its own model whatever
    the name)."""

    task: dict
    base_url: str
    instruction: str
    tools: list[Tool] = field(default_factory=list)
    max_turns: int = 8
    args: dict[str, Any] = field(default_factory=dict)
    model: str = "policy"
    output: dict[str, str] = field(default_factory=dict)  # what the program printed (stdout, stderr): kept

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
    the episode fails."""

    harness: Callable[[HarnessJob], Any]
    prompt_fn: Callable[[dict], str]
    tools: tuple[Tool, ...] = ()
    max_turns: int = 8
    harness_args: dict[str, Any] = {}  # noqa: RUF012 - set per subclass, never mutated

    async def play(self, task: dict, base_url: str) -> Any:
        cls = type(self)
        job = HarnessJob(
            task, base_url, cls.prompt_fn(task), tools=list(cls.tools), max_turns=cls.max_turns, args=cls.harness_args
        )
        try:
            return await run_in_thread(cls.harness, job)
        finally:
            if job.output:
                self.episode_info["harness_output"] = job.output


def harness_workflow(
    name: str,
    task_spec: Any,
    *,
    agent_args: dict[str, Any] | None = None,
    max_turns: int = 8,
) -> tuple[type[HarnessWorkflow], dict[str, Any]]:
    """(the workflow class that plays `task_spec` with harness `name`, its arguments)."""
    harness = get_harness(name)
    if task_spec.prompt_fn is None or task_spec.reward_fn is None:
        raise HarnessError(
            f"task {task_spec.name!r} is played by its environment step by step, so no harness fits it; harnesses "
            f"play tasks with one instruction and a reward: {', '.join(_fitting_tasks())}"
        )
    args = dict(agent_args or {})
    attributes = {
        "harness": staticmethod(harness),
        "prompt_fn": staticmethod(task_spec.prompt_fn),
        "tools": tuple(_builtin_tool(tool) for tool in args.pop("tools", [])),
        "max_turns": max_turns,
        "harness_args": args,
        "default_name": name,
        "__module__": __name__,
    }
    class_name = "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name)) + "Harness"
    return type(class_name, (HarnessWorkflow,), attributes), {"reward_fn": task_spec.reward_fn}


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


def _fitting_tasks() -> list[str]:
    from rllm.tasks import REGISTRY, get_task

    fitting = []
    for name in sorted(REGISTRY):
        try:
            spec = get_task(name)
        except Exception:  # a task whose own dependencies are missing here: not one to suggest
            continue
        if spec.prompt_fn is not None and spec.reward_fn is not None:
            fitting.append(name)
    return fitting

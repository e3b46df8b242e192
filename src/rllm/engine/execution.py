"""`AgentExecutionEngine`: run many agent/env rollouts concurrently against one model and return `Episode`s.

    engine = AgentExecutionEngine(agent_class=MyAgent, env_class=MyEnv, model=model, max_steps=5)
    episodes = engine.execute_tasks(tasks, n_rollouts=4)          # or: await engine.execute_tasks_async(...)

It is the `AgentWorkflowEngine` (engine/workflow_engine.py: scheduling, ordering, retries, timeouts, metrics) running
the built-in `AgentEnvWorkflow` (workflows/agent_env.py: the step loop, length budget, step timeout), so agent/env
rollouts and free-form workflows share one rollout core. The two front doors produce identical episodes.

Agent/env specifics: the env is built from `{**env_args, **task}`; `n_parallel` rollouts run at once; env code
runs on `env_workers` threads (default `n_parallel`), or inline on the event loop when the env class says
`blocking = False` (or `env_workers=0`); envs whose `is_multithread_safe()` is False run one call at a time.
`agent_class`, `env_class` and the other attributes are read when `execute_tasks` starts, so they can be changed
between calls.
"""

from __future__ import annotations

from typing import Any

from rllm.engine.workflow_engine import AgentWorkflowEngine, _require
from rllm.models.base import ModelClient
from rllm.workflows.agent_env import AgentEnvWorkflow
from rllm.workflows.base import Workflow
from rllm.workflows.resolve import resolve_workflow

__all__ = ["AgentExecutionEngine"]


class AgentExecutionEngine(AgentWorkflowEngine):
    """Runs `agent_class`/`env_class` rollouts of tasks against `model`. See the module docstring."""

    def __init__(
        self,
        *,
        agent_class: type,
        env_class: type,
        model: ModelClient,
        agent_args: dict[str, Any] | None = None,
        env_args: dict[str, Any] | None = None,
        max_steps: int = 10,
        step_timeout: float | None = None,
        **engine_kwargs: Any,
    ) -> None:
        """`engine_kwargs` are `AgentWorkflowEngine`'s: sampling, n_parallel, max_prompt_length,
        max_response_length, episode_timeout, retry_limit, retry_backoff, env_workers, on_episode_done."""
        _require(max_steps >= 1, "max_steps must be >= 1")
        _require(step_timeout is None or step_timeout > 0, "step_timeout must be > 0 or None")
        super().__init__(workflow_class=AgentEnvWorkflow, model=model, **engine_kwargs)
        self.agent_class, self.env_class = agent_class, env_class
        self.agent_args, self.env_args = dict(agent_args or {}), dict(env_args or {})
        self.max_steps, self.step_timeout = max_steps, step_timeout

    def _workflow_spec(self) -> tuple[type[Workflow], dict[str, Any]]:
        return resolve_workflow(
            agent_class=self.agent_class,
            env_class=self.env_class,
            agent_args=self.agent_args,
            env_args=self.env_args,
            max_steps=self.max_steps,
            step_timeout=self.step_timeout,
        )

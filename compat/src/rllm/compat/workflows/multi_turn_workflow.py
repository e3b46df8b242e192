"""rLLM v0.2's `MultiTurnWorkflow`: an agent and an env built from their constructors (`agent_cls(**agent_args)`,
`env_cls(**env_args)`, or rLLM's names for them), the task handed to `env.reset(task)`, then up to `max_steps` turns
of model call → `agent.update_from_model(text)` → `env.step(action)` → `agent.update_from_env(...)`. All turns are
one conversation (the episode uid), so they train as one row. Ends `env_done`, `max_turns` after `max_steps`, or
`max_response_length` when a reply was cut."""

from __future__ import annotations

from typing import Any

from rllm.compat.trainer.env_agent_mappings import AGENT_CLASSES, ENV_CLASSES, resolve
from rllm.compat.workflows.timing_mixin import TimingTrackingMixin
from rllm.compat.workflows.workflow import TerminationEvent, TerminationReason, Workflow

__all__ = ["MultiTurnWorkflow"]


class MultiTurnWorkflow(TimingTrackingMixin, Workflow):
    def __init__(
        self,
        agent_cls: Any,
        env_cls: Any,
        agent_args: dict | None = None,
        env_args: dict | None = None,
        max_steps: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        agent_cls = resolve(agent_cls, AGENT_CLASSES, "agent_cls")
        env_cls = resolve(env_cls, ENV_CLASSES, "env_cls")
        self.agent = agent_cls(**dict(agent_args or {}))
        self.env = env_cls(**dict(env_args or {}))
        self.max_steps = max_steps

    async def run(self, task: dict, uid: str, **kwargs: Any) -> None:
        observation, info = await self.timed_env_call(self.reset, task=task, uid=uid)
        self.agent.update_from_env(observation, 0, False, info)
        for _ in range(self.max_steps):
            output = await self.timed_llm_call(self.agent.chat_completions, application_id=uid, **kwargs)
            action = self.agent.update_from_model(output.text)
            observation, reward, done, info = await self.timed_env_call(self.env.step, action)
            self.agent.update_from_env(observation, reward, done, info)
            if output.finish_reason == "length":
                raise TerminationEvent(TerminationReason.MAX_RESPONSE_LENGTH_EXCEEDED)
            if done:
                raise TerminationEvent(TerminationReason.ENV_DONE)
        raise TerminationEvent(TerminationReason.MAX_TURNS_EXCEEDED)

    def reset(self, task: dict | None = None, uid: str | None = None) -> Any:
        super().reset(task, uid)
        return self.env.reset(task)

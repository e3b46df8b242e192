"""rLLM v0.2's `SingleTurnWorkflow`: `MultiTurnWorkflow` with one turn; the env's last observation is not shown to
the agent (`update_from_env({}, ...)`, as in rLLM)."""

from __future__ import annotations

from typing import Any

from rllm.compat.workflows.multi_turn_workflow import MultiTurnWorkflow
from rllm.compat.workflows.workflow import TerminationEvent, TerminationReason

__all__ = ["SingleTurnWorkflow"]


class SingleTurnWorkflow(MultiTurnWorkflow):
    def __init__(
        self, agent_cls: Any, env_cls: Any, agent_args: dict | None = None, env_args: dict | None = None, **kwargs: Any
    ) -> None:
        super().__init__(agent_cls, env_cls, agent_args, env_args, max_steps=1, **kwargs)

    async def run(self, task: dict, uid: str, **kwargs: Any) -> None:
        observation, info = await self.timed_env_call(self.reset, task=task, uid=uid)
        self.agent.update_from_env(observation, 0, False, info)
        output = await self.timed_llm_call(self.agent.chat_completions, application_id=uid, **kwargs)
        action = self.agent.update_from_model(output.text)
        _, reward, done, info = await self.timed_env_call(self.env.step, action)
        self.agent.update_from_env({}, reward, done, info)
        if output.finish_reason == "length":
            raise TerminationEvent(TerminationReason.MAX_RESPONSE_LENGTH_EXCEEDED)
        if done:
            raise TerminationEvent(TerminationReason.ENV_DONE)
        raise TerminationEvent(TerminationReason.MAX_TURNS_EXCEEDED)

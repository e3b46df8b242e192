"""rLLM v0.2's `SimpleWorkflow`: one model call on the task's `messages` (or a user message from its `question`,
`prompt` or `problem`), scored by `reward_function(task, Action(content))`."""

from __future__ import annotations

from typing import Any

from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory
from rllm.compat.workflows.workflow import TerminationEvent, TerminationReason, Workflow

__all__ = ["SimpleAgent", "SimpleWorkflow"]


class SimpleAgent(BaseAgent):
    """Holds the trajectory; the workflow writes its steps."""

    def __init__(self, **kwargs: Any) -> None:
        self._trajectory = Trajectory()

    def reset(self) -> None:
        self._trajectory = Trajectory()

    def update_from_model(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update_from_env(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory


class SimpleWorkflow(Workflow):
    def __init__(self, rollout_engine: Any, reward_function: Any, **kwargs: Any) -> None:
        super().__init__(rollout_engine, **kwargs)
        self.agent = SimpleAgent()
        self.reward_function = reward_function

    async def run(self, task: dict, uid: str, **kwargs: Any) -> None:
        self.reset(task, uid)
        messages = _messages(task)
        output = await self.rollout_engine.get_model_response(messages, application_id=uid, **kwargs)
        action = Action(output.content)
        reward = self.reward_function(task, action)
        reply = {"role": "assistant", "content": output.content, "reasoning": output.reasoning}
        self.agent.trajectory.steps.append(
            Step(
                chat_completions=[*messages, reply],
                thought=output.reasoning,
                action=action,
                reward=reward.reward,
                model_output=output,
            )
        )
        self.commit(agent=self.agent, reset=True)
        if output.finish_reason == "length":
            raise TerminationEvent(TerminationReason.MAX_RESPONSE_LENGTH_EXCEEDED)
        raise TerminationEvent(TerminationReason.ENV_DONE)


def _messages(task: dict) -> list[dict]:
    if task.get("messages") is not None:
        return task["messages"]
    for key in ("question", "prompt", "problem"):
        if task.get(key) is not None:
            return [{"role": "user", "content": task[key]}]
    raise ValueError("SimpleWorkflow: the task has no messages, question, prompt or problem key")

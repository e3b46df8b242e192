"""rLLM v0.2's `MathAgent` (`from rllm.agents.math_agent import MathAgent`): a question in, an answer out. The step is
opened by the question (`update_from_env`) and filled by the reply; a reply with exactly one `</think>` is split
into the thought (through the tag) and the action (the rest, stripped). With `accumulate_thinking=False` earlier
replies are shown without their thinking (a turn that then cannot extend the previous prompt is counted by rllm's
renderer as a new training row)."""

from __future__ import annotations

from typing import Any

from rllm.compat.agents._thinking import without_earlier_thinking
from rllm.compat.agents.agent import Action, BaseAgent, Step, Trajectory

__all__ = ["MathAgent"]


class MathAgent(BaseAgent):
    def __init__(self, accumulate_thinking: bool = True) -> None:
        self.accumulate_thinking = accumulate_thinking
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
        self.messages: list[dict[str, Any]] = []

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict, **kwargs: Any) -> None:
        if observation is None or observation == {}:  # the env's verdict on the last answer
            if self._trajectory.steps:
                step = self.get_current_state()
                step.reward, step.done, step.info = reward, done, info
            return
        if isinstance(observation, dict):
            if "question" not in observation:
                raise ValueError(f"MathAgent: the observation has no 'question': {observation}")
            question = observation["question"]
        elif isinstance(observation, str):
            question = observation
        else:
            raise ValueError(f"MathAgent: an observation must be a question or a dict with one, not {observation!r}")
        self.messages.append({"role": "user", "content": question})
        self._trajectory.steps.append(Step(observation=question))

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        self.messages.append({"role": "assistant", "content": response})
        step = self.get_current_state()
        step.chat_completions = self.chat_completions
        step.model_response = response
        thought, tag, answer = response.partition("</think>")
        if tag and response.count("</think>") == 1:
            step.thought, step.action = thought + tag, Action(answer.strip())
        else:
            step.thought, step.action = None, Action(response.strip())
        return step.action

    def get_current_state(self) -> Step:
        if not self._trajectory.steps:
            raise RuntimeError("MathAgent has no step yet: update_from_env must give it a question first")
        return self._trajectory.steps[-1]

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        messages = without_earlier_thinking(self.messages, self.accumulate_thinking)
        return messages

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

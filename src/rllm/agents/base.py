"""`BaseAgent`: the policy side of an agent/env rollout. It turns observations into chat messages and model
responses into actions, and keeps its own `Trajectory`.

Life cycle, per rollout: `reset()`, `update_from_env(obs, 0.0, False, info)` with the first observation, then
repeatedly: the engine sends `chat_completions` to the model, `update_from_model(output) -> Action` records a new
step and returns the action for the env, and `update_from_env(obs, reward, done, info)` records what came back.

The default methods here keep the message history and the trajectory, so a custom agent usually overrides only
`format_observation` or `update_from_env` (how an observation reads as a user message) and `update_from_model` (how
a reply becomes an action). A message may hold images as OpenAI content parts (`rllm.images`): `Workflow.generate`
turns them into data URLs in place before the model call, so the history and the steps hold JSON.
"""

from __future__ import annotations

from typing import Any

from rllm.images import is_image
from rllm.types import Action, ModelOutput, Step, Trajectory

__all__ = ["BaseAgent"]


class BaseAgent:
    system_prompt: str | None = None

    def __init__(self, **_: Any) -> None:
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
        self.messages: list[dict[str, Any]] = []
        if self.system_prompt:
            self.messages.append({"role": "system", "content": self.system_prompt})

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        """The messages the model sees next."""
        return self.messages

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    def format_observation(self, observation: Any) -> str | list[dict[str, Any]]:
        """How an observation reads as a user message: its text, or a list of content parts (`rllm.images`). An
        image (PIL) becomes an image part; the engine turns every image part into a data URL before the model call."""
        if is_image(observation):
            return [{"type": "image", "image": observation}]
        return str(observation)

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict) -> None:
        """Record what the env returned: on the last step, and as the next user message."""
        if self._trajectory.steps:
            step = self._trajectory.steps[-1]
            step.observation, step.reward, step.done, step.info = observation, float(reward), done, dict(info)
        if not done:
            self.messages.append({"role": "user", "content": self.format_observation(observation)})

    def parse_action(self, output: ModelOutput) -> Any:
        """Turn a reply into the env's action. The default hands the env the reply's text."""
        return output.content if output.content is not None else output.text

    def update_from_model(self, output: ModelOutput) -> Action:
        """Record the reply as a new step and return the action."""
        action = self.parse_action(output)
        self._trajectory.steps.append(Step(chat_completions=list(self.messages), model_output=output, action=action))
        self.messages.append({"role": "assistant", "content": output.text})
        return Action(action=action)


def speaks_text(agent: Any) -> bool:
    """Whether `agent` follows rLLM v0.2's protocol, `update_from_model(response: str)` (its class says so with
    `_rllm_v02 = True`, as `rllm.agents.agent.BaseAgent` does); rllm's own agents get the `ModelOutput`."""
    return getattr(type(agent), "_rllm_v02", False) is True

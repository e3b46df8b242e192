"""rLLM v0.2's agent module, so agents written for rLLM import and run unchanged:

    from rllm.compat.agents.agent import Action, BaseAgent, Episode, Step, Trajectory

`Action`, `Step`, `Trajectory` and `Episode` are rllm's own types (`rllm.types`), which carry rLLM's fields
(`Action(x)`, `Step.thought`/`model_response`/`mc_return`, `Trajectory.task`). `BaseAgent` here is rLLM's agent
protocol, which differs from ours (`rllm.agents.BaseAgent`) in one place: `update_from_model` gets the reply's text
(`response: str`), not the `ModelOutput`. The agent/env loop adapts at that one boundary
(`rllm.workflows.agent_env`): it hands the agent `output.text`, then puts the exact sampled `ModelOutput` (token ids
and logprobs) on the agent's current step, so a ported agent trains on what was sampled, never on a re-tokenization.

As in rLLM, only `reset` is abstract; an agent keeps its own trajectory and messages and returns them from the
`trajectory` and `chat_completions` properties. A step may be created in `update_from_env` (rLLM's MathAgent) or in
`update_from_model` (its FrozenLakeAgent and ToolAgent); the step of a model call is `get_current_state()` after
`update_from_model`. rLLM records a step's `chat_completions` after the call, so they include the agent's reply.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from rllm.types import Action, Episode, Step, Trajectory

__all__ = ["Action", "BaseAgent", "Episode", "Step", "Trajectory"]


class BaseAgent(ABC):
    """rLLM v0.2's `BaseAgent`: text in (`update_from_model(response)`), `Action` out. See the module docstring."""

    _rllm_v02 = True  # rllm's agent/env loop hands agents of this protocol the reply's text (rllm.agents.base)

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        """The messages the model sees next."""
        return []

    @property
    def trajectory(self) -> Trajectory:
        return Trajectory()

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement update_from_env to run in an agent/env loop")

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        raise NotImplementedError(f"{type(self).__name__} must implement update_from_model to run in an agent/env loop")

    @abstractmethod
    def reset(self) -> None:
        """Start a new episode: clear the trajectory and the messages."""

    def get_current_state(self) -> Step | None:
        """The latest step, None before the first."""
        steps = self.trajectory.steps
        return steps[-1] if steps else None

"""rLLM v0.2's `rllm.workflows.workflow`: `Workflow`, `TerminationReason`, `TerminationEvent`, for workflows written
against rLLM:

    class MyWorkflow(Workflow):
        def __init__(self, rollout_engine, **kwargs):
            super().__init__(rollout_engine, **kwargs)
            self.agent = MyAgent()

        async def run(self, task, uid, **kwargs):
            self.reset(task, uid)
            output = await self.rollout_engine.get_model_response(messages, application_id=uid)
            ...
            self.commit(name="solver", trajectory=trajectory)      # or return an Episode

It is rllm's `Workflow` with rLLM's constructor, `reset`, `commit(name, agent, trajectory, reset)`,
`collect_trajectories`, `run_in_executor` and hooks. Model calls through `self.rollout_engine` (an `OpenAIEngine`
or any `ClientRolloutEngine`) run through this workflow's conversations (`rllm.engine.rollout`), so the ids and
logprobs that were sampled are recorded exactly. The engine is `rllm.engine.agent_workflow_engine`'s
`AgentWorkflowEngine` (rLLM's constructor), or rllm's own `AgentWorkflowEngine`/`AgentTrainer`.

Semantics kept from rLLM: `commit` snapshots the trajectory (a deep copy) and skips an empty one; rLLM agents held as
public attributes and never committed are collected at the end; a returned `Episode` keeps its `is_correct` and
metrics; `gamma`/`reward_bonus_coeff` reshape step rewards as rLLM's `adjust_step_rewards` does; hooks may set the
episode's fields and return None (rLLM's style) or return the value (rllm's).

Differences: a normal return ends the episode `ENV_DONE` (rLLM says `UNKNOWN`); `TerminationReason` has rLLM's
names, and its values are rllm's, so episodes compare equal to either enum; an exception in `run` is an `error`
episode, which rLLM's `AgentWorkflowEngine` runs again (rllm's own engines retry only infra errors); `uid` and
`task` are set before `run` too, so a `run` that forgets `reset` is still correct.
"""

from __future__ import annotations

import copy
import functools
from enum import Enum
from typing import Any

import numpy as np

from rllm.compat.agents.agent import BaseAgent
from rllm.compat.engine.rollout.rollout_engine import _CURRENT_WORKFLOW, ClientRolloutEngine
from rllm.envs.base import BaseEnv
from rllm.types import Episode, Trajectory
from rllm.types import TerminationReason as _Reason
from rllm.workflows.base import Workflow as _Workflow
from rllm.workflows.runtime import TerminationEvent as _TerminationEvent

__all__ = ["TerminationEvent", "TerminationReason", "Workflow"]


class TerminationReason(str, Enum):
    """rLLM's names; the values are rllm's (`rllm.types.TerminationReason`), except UNKNOWN, which has none."""

    MAX_PROMPT_LENGTH_EXCEEDED = "max_prompt_length"
    MAX_RESPONSE_LENGTH_EXCEEDED = "max_response_length"
    ENV_DONE = "env_done"
    MAX_TURNS_EXCEEDED = "max_turns"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"
    ERROR = "error"


class TerminationEvent(_TerminationEvent):
    """rLLM's `TerminationEvent(reason)`; `UNKNOWN` (its default) ends the episode as a normal return does."""

    def __init__(self, reason: TerminationReason | _Reason | str = TerminationReason.UNKNOWN) -> None:
        value = reason.value if isinstance(reason, Enum) else str(reason)
        super().__init__(_Reason.ENV_DONE if value == TerminationReason.UNKNOWN.value else _Reason(value))
        self.rllm_reason = reason


_HOOKS_THAT_MAY_RETURN_NONE = ("compute_trajectory_reward", "assign_episode_correctness", "collect_metrics")


class Workflow(_Workflow):
    """rLLM v0.2's `Workflow` over rllm's. See the module docstring."""

    _rllm_v02 = True  # rLLM workflows may define gamma/adjust_step_rewards: their own shaping, kept

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _HOOKS_THAT_MAY_RETURN_NONE:
            if name in vars(cls):
                setattr(cls, name, _returning_the_field(vars(cls)[name], name))

    def __init__(
        self,
        rollout_engine: Any = None,
        executor: Any = None,
        timeout: float = 1e6,
        gamma: float = 0.0,
        reward_bonus_coeff: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.rollout_engine = rollout_engine if rollout_engine is not None else ClientRolloutEngine(None)
        self.executor = executor  # rLLM's thread pool; `run_in_executor` uses the engine's
        self.timeout = int(timeout)
        self.gamma = gamma
        self.reward_bonus_coeff = reward_bonus_coeff
        self.uid: str | None = None
        self.task: Any = None
        self._begin(None, None)

    @classmethod
    def create(cls, workflow_args: dict[str, Any]) -> Workflow:
        """As rLLM builds its workflows: `cls(rollout_engine=..., executor=..., **workflow_args)`. Without an
        engine of its own, its model calls go to the engine's model through its conversations."""
        return cls(**{"rollout_engine": ClientRolloutEngine(None), "executor": None, **workflow_args})

    async def run(self, task: dict, uid: str, **kwargs: Any) -> Episode | None:
        raise NotImplementedError(f"{type(self).__name__} must define `async def run(self, task, uid, **kwargs)`")

    # ---- rLLM's helpers ---------------------------------------------------------------------------------------

    def reset(self, task: dict | None = None, uid: str | None = None) -> None:
        """Start an episode: remember the task and uid, forget what was committed, reset every rLLM agent and env
        held as an attribute (`env.reset(task=task)`, as rLLM calls it)."""
        self._begin(task, uid)
        if hasattr(self, "_committed"):
            self._committed.clear()
        for value in self._public_attributes():
            if isinstance(value, BaseAgent):
                value.reset()
                value.trajectory.task = task
            elif isinstance(value, BaseEnv):
                value.reset(task=task)

    def commit(
        self,
        name: str | None = None,
        agent: Any = None,
        trajectory: Trajectory | None = None,  # type: ignore[override]
        reset: bool = False,
    ) -> None:
        """rLLM's commit: a snapshot of `trajectory` (or `agent.trajectory`) joins the episode, unless it is empty."""
        if isinstance(name, Trajectory):  # rllm's own signature, commit(trajectory, name=...)
            name, trajectory = None, name
        if (agent is None) == (trajectory is None):
            raise TypeError("commit() takes agent= or trajectory=, exactly one")
        snapshot = agent.trajectory if agent is not None else trajectory
        self._attach_outputs(snapshot)
        if snapshot.steps:
            super().commit(copy.deepcopy(snapshot), name=name)
        if agent is not None:
            self._commits_by_agent.add(id(agent))
            if reset:
                agent.reset()

    def collect_trajectories(self) -> Episode:
        """The episode so far: what was committed, then the uncommitted trajectories of agents held as attributes."""
        self._collect_agents()
        return Episode(id=self.uid or "", task=self.task, trajectories=list(self._committed))

    async def run_in_executor(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run blocking code on the engine's thread pool (an env call: its exceptions are infra errors)."""
        return await self.call_env(functools.partial(fn, *args, **kwargs))

    def is_multithread_safe(self) -> bool:
        return all(v.is_multithread_safe() for v in vars(self).values() if isinstance(v, BaseEnv))

    def conversation_for(self, application_id: Any) -> str:
        """The conversation of a `get_model_response` call: its application_id, else one of its own."""
        if application_id is not None:
            return str(application_id)
        self._calls += 1
        return f"call-{self._calls}"

    # ---- rLLM's hooks (defaults) ------------------------------------------------------------------------------

    def compute_trajectory_reward(self, trajectory: Trajectory) -> float:
        return trajectory.total_step_reward()

    def adjust_step_rewards(self, trajectory: Trajectory) -> None:
        """rLLM's shaping: add `reward_bonus_coeff` x the change of raw reward, then replace each step reward by
        its return discounted with `gamma` (both off by default)."""
        raw = [step.reward for step in trajectory.steps]
        if self.reward_bonus_coeff > 0:
            for i in range(1, len(raw)):
                trajectory.steps[i].reward += self.reward_bonus_coeff * (raw[i] - raw[i - 1])
        if self.gamma > 0:
            running = 0.0
            for step in reversed(trajectory.steps):
                running = step.reward + self.gamma * running
                step.reward = running

    def assign_episode_correctness(self, episode: Episode) -> bool:
        if self._returned is not None:
            return self._returned.is_correct
        return sum(t.final_reward() for t in episode.trajectories) > 0

    def collect_metrics(self, episode: Episode) -> dict[str, float]:
        metrics = super().collect_metrics(episode)
        by_name: dict[str, list[float]] = {}
        for trajectory in episode.trajectories:
            by_name.setdefault(trajectory.name, []).append(trajectory.final_reward())
        return {**metrics, **{f"{name}_acc": float(np.mean(rewards)) for name, rewards in by_name.items()}}

    # ---- engine side ------------------------------------------------------------------------------------------

    async def generate(self, messages: list[dict], **kwargs: Any) -> Any:
        output = await super().generate(messages, **kwargs)
        self._outputs.append(output)  # for the steps rLLM agents record from the text alone (_attach_outputs)
        return output

    def start_episode(self, services: Any, task: dict, uid: str) -> None:
        # The engine's per-attempt start, without rLLM's reset: `run` calls that itself (and a subclass's reset may
        # step its env, which belongs inside the episode).
        self.reset = _no_reset  # type: ignore[method-assign]
        try:
            super().start_episode(services, task, uid)
        finally:
            del self.reset
        self._begin(task, uid)

    async def run_episode(self, task: dict, uid: str) -> tuple[_Reason, Episode | None, dict]:
        token = _CURRENT_WORKFLOW.set(self)
        try:
            reason, returned, info = await super().run_episode(task, uid)
        finally:
            _CURRENT_WORKFLOW.reset(token)
        self._returned = returned if isinstance(returned, Episode) else None
        if self._returned is None:
            self._collect_agents()
        return reason, self._returned, info

    def build_episode(self, *args: Any, **kwargs: Any) -> Episode:
        episode = super().build_episode(*args, **kwargs)
        for trajectory in episode.trajectories:
            if len(trajectory.steps) > 1:
                self.adjust_step_rewards(trajectory)
        return episode

    def _begin(self, task: Any, uid: str | None) -> None:
        self.uid, self.task = uid, task
        self._commits_by_agent: set[int] = set()
        self._calls = 0
        self._outputs: list[Any] = []
        self._returned: Episode | None = None

    def _attach_outputs(self, trajectory: Trajectory) -> None:
        """rLLM agents in workflows get the reply's text only (`agent.update_from_model(output.text)`), so their
        steps have no token ids. Each such step gets the first unclaimed output of this episode whose text is the
        step's `model_response` (or, failing that, its last assistant message): the exact ids that were sampled."""
        claimed = {id(step.model_output) for step in trajectory.steps if step.model_output is not None}
        for step in trajectory.steps:
            if step.model_output is not None:
                continue
            text = step.model_response or _last_assistant_text(step.chat_completions)
            match = next((o for o in self._outputs if id(o) not in claimed and o.text == text), None)
            if match is not None:
                step.model_output = match
                claimed.add(id(match))

    def _collect_agents(self) -> None:
        for value in self._public_attributes():
            if isinstance(value, BaseAgent) and id(value) not in self._commits_by_agent:
                self.commit(agent=value)

    def _public_attributes(self) -> list[Any]:
        return [value for name, value in vars(self).items() if not name.startswith("_")]


def _no_reset(*args: Any, **kwargs: Any) -> None:
    return None


def _last_assistant_text(messages: list[dict]) -> str | None:
    replies = [m.get("content") for m in messages if m.get("role") == "assistant"]
    return replies[-1] if replies else None


def _returning_the_field(hook: Any, name: str) -> Any:
    """An rLLM hook that sets the field and returns None, made to return the field (rllm's hooks return it)."""
    field = {
        "compute_trajectory_reward": "reward",
        "assign_episode_correctness": "is_correct",
        "collect_metrics": "metrics",
    }[name]

    @functools.wraps(hook)
    def wrapper(self: Any, target: Any) -> Any:
        result = hook(self, target)
        return getattr(target, field) if result is None else result

    return wrapper

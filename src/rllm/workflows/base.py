"""`Workflow`: free async Python that calls the model, steps environments and commits named trajectories.

    class Guess(Workflow):
        async def run(self, task, uid):
            messages = [{"role": "user", "content": task["question"]}]
            output = await self.generate(messages)
            reward = await self.call_reward(my_reward_fn, task, output.text)
            self.commit(Trajectory(name="solver", steps=[Step(chat_completions=messages, model_output=output,
                                                              reward=reward)]))

`AgentWorkflowEngine` runs many of these concurrently and turns each run into an `Episode`. Inside `run`:

- `await self.generate(messages, conversation=...)` calls the model. Each independent conversation has a name: its
  prompts render so that each extends the last (token exactness), it has its own length budget, and its calls get
  seeds derived from (sampling seed, episode id, conversation, call number), so samples do not depend on
  scheduling. Concurrent conversations (k solvers at once) must use different names.
- `await self.call_env(fn, *args)` runs blocking env code on the engine's thread pool; `await self.call_reward(fn,
  *args)` runs a reward function there. Both are timed, and an exception is classified by where it came from
  (`rllm.workflows.runtime`).
- `self.commit(trajectory, name=...)` or `self.commit(agent=agent)` adds a trajectory to the episode. An agent's
  trajectory is read when the episode is built, so committing an agent before its `reset()` is fine.
- `raise TerminationEvent(reason)` ends the episode with that reason. Returning normally means `ENV_DONE`.

Post-processing, in this order, overridable: `compute_trajectory_reward` (default: the sum of step rewards, for each
trajectory whose `reward` is unset), `assign_episode_correctness` (default: every trajectory succeeded: `is_correct`
where set, else a positive reward) and `collect_metrics` (default: `role/<r>/count`, `.../reward_mean` and
`.../success_rate`, the vocabulary of `rllm.metrics`). An infra error is never correct. Step rewards are stored as
the workflow gave them: discounting is the trainer's (`algorithm.stepwise`, `algorithm.gamma`), in one place.

The engine keeps a pool of instances and reuses them: per-episode state belongs in `reset(task, uid)`, which runs
before every attempt, and resources in `cleanup()`, which runs after every attempt, whatever happened.
"""

from __future__ import annotations

import hashlib
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from rllm.agents.base import speaks_text
from rllm.errors import ImageError, RllmError
from rllm.images import encode_pil_images, normalize_images
from rllm.metrics import role_metrics
from rllm.models.base import ModelClient, SamplingParams
from rllm.types import Episode, ModelOutput, TerminationReason, Trajectory
from rllm.workflows.runtime import (
    Conversation,
    EnvRunner,
    TerminationEvent,
    classify_error,
    error_site,
    exactness_metrics,
    tag_site,
)

__all__ = ["Workflow", "WorkflowServices"]

_Reason = TerminationReason


@dataclass(frozen=True)
class WorkflowServices:
    """What the engine hands every workflow for one `execute_tasks` call."""

    model: ModelClient
    sampling: SamplingParams
    runner: EnvRunner
    max_prompt_length: int
    max_response_length: int


class Workflow:
    """Subclass and write `async def run(self, task, uid)`. See the module docstring."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "_rllm_v02", False):
            return  # rLLM v0.2's workflows (rllm.workflows.workflow) keep their own step-reward shaping
        for removed in ("gamma", "adjust_step_rewards"):
            if removed in vars(cls):
                raise TypeError(
                    f"{cls.__name__}.{removed}: workflows no longer discount step rewards; discounting happens in the "
                    "trainer only. Set algorithm.stepwise: true and algorithm.gamma: <value> in the config instead."
                )

    # ---- overridable --------------------------------------------------------------------------------------

    @classmethod
    def env_policy(cls, workflow_args: dict[str, Any]) -> tuple[bool, bool]:
        """(is env code blocking, is it multithread safe) for the engine's thread pool; see `BaseEnv`."""
        return True, True

    @classmethod
    def create(cls, workflow_args: dict[str, Any]) -> Workflow:
        """One instance for the engine's pool."""
        return cls(**workflow_args)

    def reset(self, task: dict, uid: str) -> None:
        """Per-episode state of a subclass; called before every attempt."""

    async def run(self, task: dict, uid: str) -> Episode | None:
        raise NotImplementedError(f"{type(self).__name__} must define `async def run(self, task, uid)`")

    async def cleanup(self) -> None:
        """Release what `run` opened (envs, sessions); called after every attempt, also after failures."""

    def compute_trajectory_reward(self, trajectory: Trajectory) -> float:
        return trajectory.total_step_reward()

    def assign_episode_correctness(self, episode: Episode) -> bool:
        return bool(episode.trajectories) and all(t.succeeded() for t in episode.trajectories)

    def collect_metrics(self, episode: Episode) -> dict[str, float]:
        return role_metrics([episode])

    # ---- helpers for `run` ------------------------------------------------------------------------------------

    @property
    def model(self) -> ModelClient:
        return self._services.model

    @property
    def sampling(self) -> SamplingParams:
        return self._services.sampling

    def conversation(self, name: str = "main", tools: list[dict] | None = None) -> Conversation:
        """The conversation called `name`, created on first use with the tool schemas its prompts render."""
        conversation = self._conversations.get(name)
        if conversation is None:
            services = self._services
            tokenizer = getattr(services.model, "tokenizer", None)
            conversation = Conversation(
                tokenizer,
                services.max_prompt_length,
                services.max_response_length,
                tools,
                vision=getattr(services.model, "vision", None),
            )
            self._conversations[name] = conversation
        return conversation

    async def generate(
        self, messages: list[dict], *, conversation: str = "main", tools: list[dict] | None = None, **sampling: Any
    ) -> ModelOutput:
        """One model call in the conversation named `conversation`; keyword arguments override sampling fields
        (max_tokens, ...). `tools` (OpenAI function schemas) are rendered into the conversation's prompts by the chat
        template, or sent to a chat-mode server; give them from the conversation's first call on. Images in
        `messages` (PIL images, files, HF-style parts: `rllm.images`) are first turned into data-URL parts in place,
        in the message dicts themselves, so the steps that hold them record what the model saw."""
        name, conversation = conversation, self.conversation(conversation, tools)
        if tools:
            sampling["tools"] = tools
        try:
            normalize_images(messages, in_place=True)  # rllm.images: what the model sees is what the steps record
            prompt, remaining = conversation.prompt(messages)
        except TerminationEvent:
            raise
        except ImageError as exc:  # say which model call of the episode met the image
            error = ImageError(f"step {conversation.calls} of conversation {name!r}: {exc}")
            tag_site(error, "render")
            raise error from exc
        except Exception as exc:
            tag_site(exc, "render")
            raise
        params = self._call_sampling(name, conversation.calls, sampling)
        if remaining is not None and remaining < params.max_tokens:
            params = params.model_copy(update={"max_tokens": remaining})
        started = perf_counter()
        try:
            output = await self._services.model.generate(prompt, params)
        except Exception as exc:
            tag_site(exc, "model")
            raise
        finally:
            self._times["model"] += perf_counter() - started
        try:
            conversation.record(prompt, output)
        except Exception as exc:
            tag_site(exc, "render")
            raise
        return output

    async def call_env(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking env code off the event loop (inline for non-blocking envs); its exceptions are infra errors."""
        return await self._timed_call("env", fn, args, serialize=True)

    async def call_reward(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a reward function off the event loop; its exceptions are errors (bugs) unless they are InfraError."""
        return await self._timed_call("reward", fn, args, serialize=False)

    def commit(self, trajectory: Trajectory | None = None, *, name: str | None = None, agent: Any = None) -> None:
        """Add a trajectory (or an agent, whose `trajectory` is read at the end) to the episode."""
        if (trajectory is None) == (agent is None):
            raise TypeError("commit() takes a trajectory or agent=..., exactly one")
        if trajectory is not None and name is not None:
            trajectory.name = name
        self._committed.append(trajectory if trajectory is not None else _AgentRef(agent, name))

    # ---- engine side ------------------------------------------------------------------------------------------

    def start_episode(self, services: WorkflowServices, task: dict, uid: str) -> None:
        self._services = services
        self._uid = uid
        self._conversations: dict[str, Conversation] = {}
        self._committed: list[Any] = []
        self._times = {"model": 0.0, "env": 0.0, "reward": 0.0}
        self.episode_info: dict[str, Any] = {}  # free-form notes of this attempt, merged into `episode.info`
        self.reset(task, uid)

    async def run_episode(self, task: dict, uid: str) -> tuple[TerminationReason, Episode | None, dict]:
        """Run, turning every way it can end into (reason, the episode `run` returned, error info)."""
        try:
            returned = await self.run(task, uid)
            return _Reason.ENV_DONE, returned, {}
        except TerminationEvent as event:
            return event.reason, None, _termination_info(event)
        except Exception as exc:
            site = error_site(exc)
            info = {
                "error": f"{type(exc).__name__}: {exc}",
                "error_site": site,
                "traceback": "".join(traceback.format_exception(exc)),
            }
            if getattr(exc, "retry_after", None) is not None:
                info["retry_after_s"] = float(exc.retry_after)  # the server's delay: the engine's retry honours it
            return classify_error(exc, site), None, info

    def build_episode(
        self, task: dict, uid: str, reason: TerminationReason, returned: Episode | None, info: dict, time_total: float
    ) -> Episode:
        trajectories = self._trajectories(returned)
        _record_images(trajectories)
        if self.episode_info.get("invalid_trajectories") and reason not in (_Reason.ERROR, _Reason.INFRA_ERROR):
            reason = _Reason.ERROR  # nothing of it can be trained: an episode missing a trajectory is not done
            info = {"error": self.episode_info["invalid_trajectory_error"], "error_site": "agent", **info}
        for trajectory in trajectories:
            if not trajectory.has_reward():
                trajectory.reward = self.compute_trajectory_reward(trajectory)
        episode = Episode(
            id=uid,
            task=task,
            trajectories=trajectories,
            termination_reason=reason,
            info={**(returned.info if returned else {}), **self.episode_info, **info},
        )
        episode.is_correct = reason is not _Reason.INFRA_ERROR and bool(self.assign_episode_correctness(episode))
        conversations = self._conversations.values()
        episode.metrics = {
            "steps": sum(len(t.steps) for t in trajectories),
            "token_mismatch": sum(c.mismatches for c in conversations),
            **exactness_metrics(conversations),
            "prompt_tokens": sum(c.first_prompt_length for c in conversations),
            "completion_tokens": sum(c.completion_tokens for c in conversations),
            "response_tokens": sum(c.response_tokens for c in conversations),
            **{f"time_{k}": v for k, v in self._times.items()},
            "time_total": time_total,
            **(returned.metrics if returned else {}),
            **self.collect_metrics(episode),
        }
        return episode

    # ---- internals ----------------------------------------------------------------------------------------

    def _trajectories(self, returned: Episode | None) -> list[Trajectory]:
        """The committed and returned trajectories; an agent's invalid one is left out, counted in
        `episode_info["invalid_trajectories"]` with its error (the episode then ends as an error)."""
        out: list[Trajectory] = []
        for item in self._committed:
            try:
                out.append(item.trajectory() if isinstance(item, _AgentRef) else item)
            except AgentOutputError as exc:
                self.episode_info["invalid_trajectories"] = self.episode_info.get("invalid_trajectories", 0) + 1
                self.episode_info.setdefault("invalid_trajectory_error", str(exc))
        out.extend(returned.trajectories if returned is not None else [])
        unique = {id(t): t for t in out}  # a trajectory both committed and returned counts once
        return list(unique.values())

    def _call_sampling(self, conversation: str, call: int, overrides: dict[str, Any]) -> SamplingParams:
        """With a seed set, each call gets its own seed derived from (seed, episode id, conversation, call number):
        samples are reproducible whatever order concurrent rollouts reach the model in, and the n rollouts of one
        task (and the turns of one rollout) still differ. A retry of the episode replays the same seeds."""
        sampling = self._services.sampling
        if overrides:
            unknown = sorted(set(overrides) - set(SamplingParams.model_fields))
            if unknown:  # model_copy would keep them and sample without them
                raise TypeError(
                    f"{type(self).__name__}.generate() got {', '.join(unknown)}: not a sampling setting; the settings "
                    f"are {', '.join(SamplingParams.model_fields)}"
                )
            sampling = SamplingParams.model_validate({**sampling.model_dump(), **overrides})
        if sampling.seed is None:
            return sampling
        scope = self._uid if conversation == "main" else f"{self._uid}:{conversation}"
        key = f"{sampling.seed}:{scope}:{call}".encode()
        derived = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") & 0x7FFF_FFFF_FFFF_FFFF
        return sampling.model_copy(update={"seed": derived})

    async def _timed_call(self, site: str, fn: Callable[..., Any], args: tuple, *, serialize: bool) -> Any:
        started = perf_counter()
        try:
            return await self._services.runner.call(fn, *args, serialize=serialize)
        except Exception as exc:
            tag_site(exc, site)
            raise
        finally:
            self._times[site] += perf_counter() - started


def _record_images(trajectories: list[Trajectory]) -> None:
    """Every image of the episode in the one JSON form of `rllm.images`: messages a step recorded without sending
    them through `generate` (which normalises the ones it sends), and PIL images an environment returned as
    observations (the episode is written to disk as JSON)."""
    for trajectory in trajectories:
        for step in trajectory.steps:
            try:
                step.chat_completions = normalize_images(step.chat_completions)
            except ImageError:  # a path that cannot be read, in messages never sent: kept as given (it is JSON)
                pass
            step.observation = encode_pil_images(step.observation)


@dataclass
class _AgentRef:
    agent: Any
    name: str | None

    def trajectory(self) -> Trajectory:
        trajectory = agent_trajectory(self.agent)
        if self.name is not None:
            trajectory.name = self.name
        if speaks_text(self.agent):  # rLLM agents may open a step in update_from_env for a call that never came
            while trajectory.steps and trajectory.steps[-1].model_output is None:
                trajectory.steps.pop()
        return trajectory


class AgentOutputError(RllmError, TypeError):
    """A user's agent handed back something that is not what the engine needs (its class and property named)."""


def agent_trajectory(agent: Any) -> Trajectory:
    """`agent.trajectory`, checked at the boundary: anything but a `Trajectory` is the agent's bug, reported with its
    class and property (tagged as agent code) instead of an AttributeError deep in the engine."""
    trajectory = agent.trajectory
    if not isinstance(trajectory, Trajectory):
        error = AgentOutputError(
            f"{type(agent).__name__}.trajectory returned {type(trajectory).__name__}, not a rllm Trajectory: keep one "
            "(self._trajectory = Trajectory() in reset) and return it from the trajectory property"
        )
        tag_site(error, "agent")
        raise error
    return trajectory


def _termination_info(event: TerminationEvent) -> dict[str, Any]:
    if event.reason is _Reason.TIMEOUT:
        return {"error": event.message or "timed out", "error_site": "timeout"}
    return {"termination_message": event.message} if event.message else {}

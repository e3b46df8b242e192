"""One attempt at one agent/env rollout: the step loop, its length budget, error classification and the Episode it
produces. `AgentExecutionEngine` (engine/execution.py) schedules these, retries them and orders the results.

Choices recorded here (see also the engine's docstring):

- Where an exception came from decides what it means, after its type: `InfraError` anywhere is an infra error
  (retried) and `PolicyError` anywhere is a policy error (the model's fault, never retried). Otherwise an exception
  from env code (`from_dict`, `reset`, `step`) is an infra error (an env crash is ours, not the policy's), one from
  the model client is an infra error only if it is an `OSError` (connection refused, socket timeout: clients should
  raise `InfraError`, this catches the ones that let them through) and otherwise `ERROR`, and one from agent code or
  chat rendering is `ERROR` (a bug; the traceback goes in `episode.info["traceback"]`).
- Length budget (only when the model has a tokenizer, i.e. the prompt is token ids; without ids nothing can be
  counted and the checks are skipped). A trajectory trains as rows `[prompt, A0, obs1, A1, ...]` (DESIGN.md):
  `max_prompt_length` bounds a row's prompt and `max_response_length` everything after it (completions and the
  observation deltas between them). So each call gets `max_tokens = min(sampling.max_tokens, remaining)`, and the
  rollout ends with `MAX_RESPONSE_LENGTH` when nothing remains, which guarantees the merged row fits
  `max_prompt_length + max_response_length`. A step that does not extend the previous prompt (the ChatRenderer
  counts a mismatch) starts a new row, whose prompt is bounded by `max_prompt_length` again; for the usual agent
  that only appends messages there is one row and the bound applies to the first prompt only.
- A reply the agent rejects (it raised in `update_from_model`, e.g. a `PolicyError`) is still recorded as a step
  (action None): the configured policy-error reward needs the tokens it applies to.
- When the budget cut a completion short (`finish_reason == "length"` with the row full) the step is still given
  to the agent and recorded (its tokens are trainable) but the env is not stepped with a truncated action.
- After `agent.update_from_env` the engine writes the env's `reward`, `done` and `info` onto the step the action
  came from (and the observation if the agent left it empty): the env is the source of truth for step rewards,
  whatever the agent records.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from rllm.errors import InfraError, PolicyError
from rllm.models.base import ModelClient, SamplingParams
from rllm.models.chat import ChatRenderer
from rllm.types import Action, Episode, ModelOutput, Step, TerminationReason, Trajectory

__all__ = ["EnvRunner", "Rollout", "RolloutSettings", "classify_error"]

_Reason = TerminationReason


@dataclass(frozen=True)
class RolloutSettings:
    """What every rollout of one engine shares."""

    agent_class: type
    env_class: type
    agent_args: dict[str, Any]
    env_args: dict[str, Any]
    model: ModelClient
    sampling: SamplingParams
    max_steps: int
    max_prompt_length: int
    max_response_length: int
    step_timeout: float | None


class EnvRunner:
    """Runs blocking env code on a thread pool so it never blocks the event loop. Envs that are not multithread
    safe take a lock *inside* the worker thread: a step abandoned by a timeout keeps the lock until it really
    returns, so two calls into such envs never overlap even then.

    With no executor the calls run inline on the event loop thread (the engine's `env_workers=0`): no thread hop
    (~50 us a call), for envs whose calls take microseconds; a slow call then stalls every rollout, and a step
    timeout cannot interrupt it."""

    def __init__(self, executor: Executor | None, serialize: bool) -> None:
        self._executor = executor
        self._lock = threading.Lock() if serialize else None

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._executor is None:
            return fn(*args)  # one thread, so calls never overlap: no lock needed
        loop = asyncio.get_running_loop()
        if self._lock is None:
            return await loop.run_in_executor(self._executor, fn, *args)
        return await loop.run_in_executor(self._executor, self._locked, fn, args)

    def _locked(self, fn: Callable[..., Any], args: tuple) -> Any:
        with self._lock:
            return fn(*args)


def classify_error(exc: BaseException, site: str) -> TerminationReason:
    """What an exception raised at `site` ("env", "model", "agent", "render") means for the rollout."""
    if isinstance(exc, InfraError):
        return _Reason.INFRA_ERROR
    if isinstance(exc, PolicyError):
        return _Reason.POLICY_ERROR
    if site == "env" or (site == "model" and isinstance(exc, OSError)):
        return _Reason.INFRA_ERROR
    return _Reason.ERROR


class Rollout:
    """The state of one attempt. It is built fresh for every retry, so nothing leaks between attempts; whatever it
    got through before a failure or timeout is still turned into an Episode."""

    def __init__(self, settings: RolloutSettings, runner: EnvRunner, task: dict, episode_id: str = "") -> None:
        self.settings = settings
        self.runner = runner
        self.task = task
        self.episode_id = episode_id
        self.agent: Any = None
        self.env: Any = None
        tokenizer = getattr(settings.model, "tokenizer", None)
        self.renderer = ChatRenderer(tokenizer) if tokenizer is not None else None
        self.site = "agent"  # which code is running, to classify an exception
        self.error: BaseException | None = None
        self.error_text: str | None = None
        self.close_error: str | None = None
        self.last_env_info: dict | None = None
        self.time_model = self.time_env = 0.0
        self.prompt_tokens = self.completion_tokens = self.response_tokens = 0
        self._row_prompt_length: int | None = None  # prompt length of the training row being filled
        self._row_mismatches = 0  # renderer mismatches when that row started

    # ---- the loop -------------------------------------------------------------------------------------------

    async def run(self) -> TerminationReason:
        """Run until the env is done or a limit or an error stops it. Never raises (except cancellation)."""
        try:
            await self._start()
            step_timeout = self.settings.step_timeout
            for _ in range(self.settings.max_steps):
                if step_timeout is None:
                    reason = await self._step()
                else:
                    reason = await self._timed_step(step_timeout)
                if reason is not None:
                    return reason
            return _Reason.MAX_TURNS
        except Exception as exc:  # noqa: BLE001 - every failure becomes a termination reason, none is dropped
            return self.fail(exc)

    def fail(
        self, exc: BaseException, reason: TerminationReason | None = None, text: str | None = None
    ) -> TerminationReason:
        """Remember why the rollout stopped; the reason is classified from the exception unless given."""
        self.error = exc
        self.error_text = text or f"{type(exc).__name__}: {exc}"
        return reason or classify_error(exc, self.site)

    async def _timed_step(self, timeout: float) -> TerminationReason | None:
        try:
            async with asyncio.timeout(timeout) as deadline:
                return await self._step()
        except TimeoutError as exc:
            if not deadline.expired():
                raise  # a TimeoutError raised by user code: classified by where it came from
            phase, self.site = self.site, "timeout"
            return self.fail(exc, _Reason.TIMEOUT, f"step timed out after {timeout}s (in {phase} code)")

    async def _start(self) -> None:
        settings = self.settings
        self.site = "agent"
        self.agent = settings.agent_class(**settings.agent_args)
        self.site = "env"
        started = perf_counter()
        self.env = await self.runner.call(settings.env_class.from_dict, {**settings.env_args, **self.task})
        observation, info = await self.runner.call(self.env.reset)
        self.time_env += perf_counter() - started
        self.site = "agent"
        self.agent.reset()
        self.agent.update_from_env(observation, 0.0, False, info)

    async def _step(self) -> TerminationReason | None:
        settings, agent = self.settings, self.agent
        self.site = "agent"
        messages = agent.chat_completions
        n_messages = len(messages)
        prompt: Any = messages
        sampling = self._call_sampling()
        if self.renderer is not None:
            self.site = "render"
            prompt = self.renderer.render(messages)
            stop, remaining = self._budget(prompt)
            if stop is not None:
                return stop
            if remaining < sampling.max_tokens:
                sampling = sampling.model_copy(update={"max_tokens": remaining})

        self.site = "model"
        started = perf_counter()
        output = await settings.model.generate(prompt, sampling)
        self.time_model += perf_counter() - started
        row_full = self._count_output(prompt, output)

        self.site = "agent"
        n_steps = len(agent.trajectory.steps)
        try:
            action = agent.update_from_model(output)
        except Exception:
            # Keep the sampled reply even when the agent rejects it: a policy error's reward needs its tokens.
            self._own_step(n_steps, messages, n_messages, output, None)
            raise
        action = action.action if isinstance(action, Action) else action
        step = self._own_step(n_steps, messages, n_messages, output, action)
        if row_full and output.finish_reason == "length":
            return _Reason.MAX_RESPONSE_LENGTH

        self.site = "env"
        started = perf_counter()
        observation, reward, done, info = await self.runner.call(self.env.step, action)
        self.time_env += perf_counter() - started
        self.last_env_info = info
        self.site = "agent"
        agent.update_from_env(observation, reward, done, info)
        step.reward, step.done = float(reward), bool(done)
        if info:
            step.info.update(info)
        if step.observation is None:
            step.observation = observation
        return _Reason.ENV_DONE if done else None

    # ---- helpers ------------------------------------------------------------------------------------------

    def _call_sampling(self) -> SamplingParams:
        """With a seed set, each call gets its own seed derived from (seed, episode id, turn): samples are
        reproducible whatever order the concurrent rollouts reach the model in, and the n rollouts of one task
        (and the turns of one rollout) still differ. A retry of the episode replays the same seeds."""
        sampling = self.settings.sampling
        if sampling.seed is None:
            return sampling
        turn = len(self.agent.trajectory.steps)
        key = f"{sampling.seed}:{self.episode_id}:{turn}".encode()
        derived = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") & 0x7FFF_FFFF_FFFF_FFFF
        return sampling.model_copy(update={"seed": derived})

    def _budget(self, prompt_ids: list[int]) -> tuple[TerminationReason | None, int]:
        """(a termination, or None, and how many tokens the next completion may have)."""
        settings = self.settings
        if self._row_prompt_length is None or self.renderer.mismatches != self._row_mismatches:
            self._row_prompt_length = len(prompt_ids)  # a new training row starts with this prompt
            self._row_mismatches = self.renderer.mismatches
            if not self.prompt_tokens:
                self.prompt_tokens = len(prompt_ids)
            if len(prompt_ids) > settings.max_prompt_length:
                return _Reason.MAX_PROMPT_LENGTH, 0
        remaining = settings.max_response_length - (len(prompt_ids) - self._row_prompt_length)
        if remaining <= 0:
            return _Reason.MAX_RESPONSE_LENGTH, 0
        return None, remaining

    def _count_output(self, prompt: Any, output: ModelOutput) -> bool:
        """Record the output's tokens; True if the current row's response budget is now used up."""
        if self.renderer is None:
            return False
        self.site = "render"
        self.renderer.record(output)
        self.completion_tokens += output.completion_length
        self.response_tokens = len(prompt) - self._row_prompt_length + output.completion_length
        return self.response_tokens >= self.settings.max_response_length

    def _own_step(self, n_steps: int, messages: list[dict], n_messages: int, output: ModelOutput, action: Any) -> Step:
        """The step this model call made, with what the agent left out filled in (a custom agent may record less,
        or no step at all). The messages the model saw are the first `n_messages` of the list the agent handed
        out (it may have appended its reply since); they are copied only when the agent did not record them."""
        steps = self.agent.trajectory.steps
        if len(steps) == n_steps:
            steps.append(Step(chat_completions=messages[:n_messages], model_output=output, action=action))
            return steps[-1]
        step = steps[-1]
        if step.model_output is None:
            step.model_output = output
        if not step.chat_completions:
            step.chat_completions = messages[:n_messages]
        return step

    async def close(self) -> None:
        """Close the env (always, once). A failing close does not change the outcome: the rollout's data is
        complete; the error is reported in `info["close_error"]`."""
        if self.env is None:
            return
        env, self.env = self.env, None
        try:
            await self.runner.call(env.close)
        except Exception as exc:  # noqa: BLE001
            self.close_error = f"{type(exc).__name__}: {exc}"

    # ---- the result ---------------------------------------------------------------------------------------

    def episode(self, episode_id: str, reason: TerminationReason, time_total: float) -> Episode:
        trajectory = self.agent.trajectory if self.agent is not None else Trajectory()
        if trajectory.reward is None:
            trajectory.reward = trajectory.total_step_reward()
        info: dict[str, Any] = {}
        if self.error is not None:
            info["error"] = self.error_text
            info["error_site"] = self.site
            if self.site != "timeout":
                info["traceback"] = "".join(traceback.format_exception(self.error))
        if self.close_error is not None:
            info["close_error"] = self.close_error
        return Episode(
            id=episode_id,
            task=self.task,
            trajectories=[trajectory],
            termination_reason=reason,
            is_correct=self._is_correct(reason, trajectory),
            metrics={
                "steps": len(trajectory.steps),
                "token_mismatch": self.renderer.mismatches if self.renderer is not None else 0,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "response_tokens": self.response_tokens,
                "time_model": self.time_model,
                "time_env": self.time_env,
                "time_total": time_total,
            },
            info=info,
        )

    def _is_correct(self, reason: TerminationReason, trajectory: Trajectory) -> bool:
        """An env that reports `info["success"]` on its last step decides; otherwise a positive reward counts.
        An infra error is never correct: that episode is not the policy's result."""
        if reason is _Reason.INFRA_ERROR:
            return False
        if self.last_env_info and "success" in self.last_env_info:
            return bool(self.last_env_info["success"])
        return (trajectory.reward or 0.0) > 0

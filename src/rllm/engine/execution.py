"""`AgentExecutionEngine`: run many agent/env rollouts concurrently against one model and return `Episode`s.

    engine = AgentExecutionEngine(agent_class=MyAgent, env_class=MyEnv, model=model, max_steps=5)
    episodes = engine.execute_tasks(tasks, n_rollouts=4)          # or: await engine.execute_tasks_async(...)

Design choices:

- Everything runs on one asyncio event loop; at most `n_parallel_agents` rollouts are in flight (a semaphore).
  Blocking env code (`from_dict`, `reset`, `step`, `close`) runs on a thread pool of `env_workers` threads
  (default `n_parallel_agents`), created once per `execute_tasks_async` call; envs whose `is_multithread_safe()`
  is False run one call at a time. `env_workers=0` runs env code inline on the loop instead: for envs whose
  calls take microseconds it saves a thread hop per call (a slow env would then stall every rollout). With
  `env_workers=None` (default) the env class decides through `BaseEnv.blocking`.
- Every (task, rollout) yields exactly one Episode, in task order with a task's rollouts together
  (`tasks[0]:0, tasks[0]:1, ..., tasks[1]:0, ...`), whatever order they finished in. Its id is
  `"{task_id}:{rollout_idx}"` where task_id is `task["id"]`, else `task["uid"]`, else the task's index.
- The env is built from `{**env_args, **task}`: a dataset row's own value beats the engine-wide default.
- Failures (classified in `rllm.engine.rollout`): an infra error retries the whole rollout from scratch, with a
  fresh agent and env, up to `retry_limit` times, waiting `retry_backoff * 2**attempt` seconds between attempts
  (the concurrency slot is released while waiting). If it still fails the episode is kept with `INFRA_ERROR` and
  the error in `info`; earlier attempts' errors are in `info["retry_errors"]`. Policy errors and agent bugs are
  not retried (`POLICY_ERROR`, `ERROR` with `info["traceback"]`).
- `step_timeout` bounds one model call + env step, `trajectory_timeout` one attempt of a whole rollout (a retry
  gets a fresh budget); either ends it with `TIMEOUT`, keeping the steps so far. Python cannot interrupt a thread,
  so an env call that is timed out keeps running in its worker until it returns; `env.close()` is still called.
- Metrics per episode: steps, token_mismatch, prompt/completion/response tokens, time_model, time_env,
  time_total (all of the last attempt), retries and infra_errors (over all attempts).
- `on_episode_done(episode)` is called as each episode finishes (a progress bar hook); an exception in it stops
  the whole run, since it is a bug in the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter
from typing import Any

from rllm.engine.rollout import EnvRunner, Rollout, RolloutSettings
from rllm.models.base import ModelClient, SamplingParams
from rllm.types import Episode, TerminationReason

__all__ = ["AgentExecutionEngine"]


class AgentExecutionEngine:
    """Runs `agent_class`/`env_class` rollouts of tasks against `model`. See the module docstring."""

    def __init__(
        self,
        *,
        agent_class: type,
        env_class: type,
        model: ModelClient,
        agent_args: dict[str, Any] | None = None,
        env_args: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        n_parallel_agents: int = 64,
        max_steps: int = 10,
        max_prompt_length: int = 2048,
        max_response_length: int = 4096,
        step_timeout: float | None = None,
        trajectory_timeout: float | None = None,
        retry_limit: int = 2,
        retry_backoff: float = 0.5,
        env_workers: int | None = None,
        on_episode_done: Callable[[Episode], None] | None = None,
    ) -> None:
        _require(n_parallel_agents >= 1, "n_parallel_agents must be >= 1")
        _require(max_steps >= 1, "max_steps must be >= 1")
        _require(max_prompt_length >= 1 and max_response_length >= 1, "length limits must be >= 1")
        _require(retry_limit >= 0 and retry_backoff >= 0, "retry_limit and retry_backoff must be >= 0")
        _require(step_timeout is None or step_timeout > 0, "step_timeout must be > 0 or None")
        _require(trajectory_timeout is None or trajectory_timeout > 0, "trajectory_timeout must be > 0 or None")
        _require(env_workers is None or env_workers >= 0, "env_workers must be >= 0 or None")
        self.agent_class = agent_class
        self.env_class = env_class
        self.model = model
        self.agent_args = dict(agent_args or {})
        self.env_args = dict(env_args or {})
        self.sampling = sampling or SamplingParams()
        self.n_parallel_agents = n_parallel_agents
        self.max_steps = max_steps
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self.step_timeout = step_timeout
        self.trajectory_timeout = trajectory_timeout
        self.retry_limit = retry_limit
        self.retry_backoff = retry_backoff
        self.env_workers = env_workers
        self.on_episode_done = on_episode_done

    # ---- public API ---------------------------------------------------------------------------------------

    def execute_tasks(self, tasks: Sequence[dict], n_rollouts: int = 1) -> list[Episode]:
        """Blocking form of `execute_tasks_async`, for scripts and notebooks without a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.execute_tasks_async(tasks, n_rollouts))
        raise RuntimeError(
            "execute_tasks() was called inside a running event loop (e.g. Jupyter or async code); "
            "use `await engine.execute_tasks_async(tasks, n_rollouts)` instead"
        )

    async def execute_tasks_async(self, tasks: Sequence[dict], n_rollouts: int = 1) -> list[Episode]:
        """Roll out every task `n_rollouts` times; episodes come back grouped by task, in task order."""
        _require(n_rollouts >= 1, "n_rollouts must be >= 1")
        jobs = [(task, _task_id(task, index)) for index, task in enumerate(tasks)]
        settings = self._settings()
        slots = asyncio.Semaphore(self.n_parallel_agents)
        workers = self.env_workers
        if workers is None:  # the env class decides: see BaseEnv.blocking
            workers = self.n_parallel_agents if getattr(self.env_class, "blocking", True) else 0
        executor = ThreadPoolExecutor(workers, thread_name_prefix="rllm-env") if workers else None
        runner = EnvRunner(executor, serialize=not self.env_class.is_multithread_safe())
        try:
            futures = [
                asyncio.ensure_future(self._run_episode(settings, runner, slots, task, f"{task_id}:{rollout}"))
                for task, task_id in jobs
                for rollout in range(n_rollouts)
            ]
            try:
                return list(await asyncio.gather(*futures))
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        finally:
            # Don't wait for env calls abandoned by a timeout: they finish on their own in the background.
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)

    # ---- one episode --------------------------------------------------------------------------------------

    def _settings(self) -> RolloutSettings:
        return RolloutSettings(
            agent_class=self.agent_class,
            env_class=self.env_class,
            agent_args=self.agent_args,
            env_args=self.env_args,
            model=self.model,
            sampling=self.sampling,
            max_steps=self.max_steps,
            max_prompt_length=self.max_prompt_length,
            max_response_length=self.max_response_length,
            step_timeout=self.step_timeout,
        )

    async def _run_episode(
        self, settings: RolloutSettings, runner: EnvRunner, slots: asyncio.Semaphore, task: dict, episode_id: str
    ) -> Episode:
        """Attempts until one is not an infra error or the retries are spent; the last attempt is the episode."""
        retry_errors: list[str | None] = []
        attempt = 0
        while True:
            async with slots:
                episode = await self._attempt(settings, runner, task, episode_id)
            failed = episode.termination_reason is TerminationReason.INFRA_ERROR
            if not failed or attempt >= self.retry_limit:
                break
            retry_errors.append(episode.info.get("error"))
            await asyncio.sleep(self.retry_backoff * 2**attempt)
            attempt += 1
        episode.metrics["retries"] = attempt
        episode.metrics["infra_errors"] = len(retry_errors) + int(failed)
        if retry_errors:
            episode.info["retry_errors"] = retry_errors
        if self.on_episode_done is not None:
            self.on_episode_done(episode)
        return episode

    async def _attempt(self, settings: RolloutSettings, runner: EnvRunner, task: dict, episode_id: str) -> Episode:
        rollout = Rollout(settings, runner, task, episode_id)
        started = perf_counter()
        timeout = self.trajectory_timeout
        try:
            if timeout is None:
                reason = await rollout.run()
            else:
                try:
                    async with asyncio.timeout(timeout) as deadline:
                        reason = await rollout.run()
                except TimeoutError as exc:
                    if not deadline.expired():
                        raise
                    rollout.site = "timeout"
                    reason = rollout.fail(exc, TerminationReason.TIMEOUT, f"trajectory timed out after {timeout}s")
        finally:
            await rollout.close()
        return rollout.episode(episode_id, reason, perf_counter() - started)


def _task_id(task: Any, index: int) -> str:
    if not isinstance(task, dict):
        raise TypeError(f"tasks must be dicts (one dataset row each), got {type(task).__name__} at index {index}")
    for key in ("id", "uid"):
        if task.get(key) is not None:
            return str(task[key])
    return str(index)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)

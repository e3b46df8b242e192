"""`AgentWorkflowEngine`: run many workflow rollouts concurrently against one model and return `Episode`s.

    engine = AgentWorkflowEngine(workflow_class=SolverJudgeWorkflow, workflow_args={...}, model=model)
    episodes = engine.execute_tasks(tasks, n_rollouts=4)          # or: await engine.execute_tasks_async(...)
    engine.metrics                                                # summary of the last call

Design choices:

- Everything runs on one asyncio event loop. Each call builds a pool of `n_parallel` workflow instances
  (fewer if there are fewer rollouts); a rollout takes an instance from the pool for one attempt and gives it
  back, so at most `n_parallel` rollouts are in flight. Blocking env code runs on a thread pool of
  `env_workers` threads (default: `n_parallel`, or 0, i.e. inline on the loop, when the workflow says its env
  code does not block; see `Workflow.env_policy`).
- Every (task, rollout) yields exactly one Episode, in task order with a task's rollouts together
  (`tasks[0]:0, tasks[0]:1, ..., tasks[1]:0, ...`), whatever order they finished in. Its id (the workflow's `uid`)
  is `"{task_id}:{rollout_idx}"` where task_id is `task["id"]`, else `task["uid"]`, else the task's index.
- Failures (classified in `rllm.workflows.runtime`): an infra error retries the whole rollout from scratch (the
  workflow is `reset`), up to `retry_limit` times, waiting `retry_backoff * 2**attempt` seconds between attempts,
  or the server's Retry-After when it asked for longer (the instance goes back to the pool while waiting). If it
  still fails the episode is kept with `INFRA_ERROR` and the error in `info`; earlier attempts' errors are in
  `info["retry_errors"]`. Policy errors and workflow bugs are not retried (`POLICY_ERROR`, `ERROR` with
  `info["traceback"]`).
- `episode_timeout` bounds one attempt of a whole rollout (a retry gets a fresh budget) and ends it with
  `TIMEOUT`, keeping what was committed so far.
- Metrics per episode: steps, token counts, token_mismatch, time_model / time_env / time_reward / time_total (of the
  last attempt), retries and infra_errors (over all attempts), and the workflow's own (per role by default).
  `engine.metrics` summarises the last call (`rllm.metrics.summarize_episodes`: success rate and mean reward
  overall and per role, termination reason fractions, mean times).
- `on_episode_done(episode)` is called as each episode finishes (a progress bar hook); an exception in it stops
  the whole run, since it is a bug in the caller.
- With `rllm.runtime` enabled (`gc_tuning`; the CLI enables it, a library user calls `rllm.runtime.enable()`), the
  garbage collector is tuned for the call, and put back when the last running call ends. It leaves the objects
  that existed before the call alone (`gc.freeze`): a process that loaded a tokenizer holds 300k long-lived objects
  (transformers' modules; a training process many more) and each full collection walked them all, 115-150 ms
  measured, with every rollout on the loop stalled. And the youngest generation is collected after 10,000 new
  objects instead of 700: each step makes hundreds (requests, messages, steps) that live as long as their rollout,
  and the collections that found them alive took 13-30 us of a 230 us step, 4-12 us after (measured on 2 cores).
  Without it the collector is left as the program set it, during the call too: its state is the whole process's.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter
from typing import Any

from rllm import runtime
from rllm.metrics import summarize_episodes
from rllm.models.base import ModelClient, SamplingParams
from rllm.types import Episode, TerminationReason
from rllm.workflows.base import Workflow, WorkflowServices
from rllm.workflows.runtime import EnvRunner

__all__ = ["AgentWorkflowEngine"]


class AgentWorkflowEngine:
    """Runs `workflow_class(**workflow_args)` rollouts of tasks against `model`. See the module docstring."""

    def __init__(
        self,
        *,
        workflow_class: type[Workflow],
        model: ModelClient,
        workflow_args: dict[str, Any] | None = None,
        sampling: SamplingParams | None = None,
        n_parallel: int = 64,
        max_prompt_length: int = 2048,
        max_response_length: int = 4096,
        episode_timeout: float | None = None,
        retry_limit: int = 2,
        retry_backoff: float = 0.5,
        env_workers: int | None = None,
        on_episode_done: Callable[[Episode], None] | None = None,
    ) -> None:
        _require(
            isinstance(workflow_class, type) and issubclass(workflow_class, Workflow),
            f"workflow_class must be a subclass of rllm.workflows.Workflow, got {workflow_class!r}",
        )
        _require(n_parallel >= 1, "n_parallel must be >= 1")
        _require(max_prompt_length >= 1 and max_response_length >= 1, "length limits must be >= 1")
        _require(retry_limit >= 0 and retry_backoff >= 0, "retry_limit and retry_backoff must be >= 0")
        _require(episode_timeout is None or episode_timeout > 0, "episode_timeout must be > 0 or None")
        _require(env_workers is None or env_workers >= 0, "env_workers must be >= 0 or None")
        self.workflow_class = workflow_class
        self.workflow_args = dict(workflow_args or {})
        self.model = model
        self.sampling = sampling or SamplingParams()
        self.n_parallel = n_parallel
        self.max_prompt_length = max_prompt_length
        self.max_response_length = max_response_length
        self.episode_timeout = episode_timeout
        self.retry_limit = retry_limit
        self.retry_backoff = retry_backoff
        self.env_workers = env_workers
        self.on_episode_done = on_episode_done
        self.metrics: dict[str, Any] = {}

    # ---- public API ---------------------------------------------------------------------------------------

    def execute_tasks(
        self, tasks: Sequence[dict], n_rollouts: int = 1, *, sampling: SamplingParams | None = None
    ) -> list[Episode]:
        """Blocking form of `execute_tasks_async`, for scripts and notebooks without a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._execute_and_release(tasks, n_rollouts, sampling))
        raise RuntimeError(
            "execute_tasks() was called inside a running event loop (e.g. Jupyter or async code); "
            "use `await engine.execute_tasks_async(tasks, n_rollouts)` instead"
        )

    async def _execute_and_release(
        self, tasks: Sequence[dict], n_rollouts: int, sampling: SamplingParams | None
    ) -> list[Episode]:
        """`execute_tasks_async` on the blocking call's own event loop, then close the client's HTTP session of that
        loop (it dies with the loop; the client opens a new one on its next call)."""
        try:
            return await self.execute_tasks_async(tasks, n_rollouts, sampling=sampling)
        finally:
            if hasattr(self.model, "aclose"):
                await self.model.aclose()

    async def execute_tasks_async(
        self,
        tasks: Sequence[dict],
        n_rollouts: int = 1,
        *,
        uids: Sequence[str] | None = None,
        sampling: SamplingParams | None = None,
    ) -> list[Episode]:
        """Roll out every task `n_rollouts` times; episodes come back grouped by task, in task order. `uids` gives
        each task's episode id (`"{task_id}:{rollout_idx}"`) instead, one rollout each (rLLM's `task_ids`).
        `sampling` is this call's (the trainer seeds each step's): an argument, not a change of `self.sampling`
        (the default), so concurrent calls (training's rollouts beside a validation) never see each other's."""
        _require(n_rollouts >= 1, "n_rollouts must be >= 1")
        if uids is not None:
            _require(n_rollouts == 1 and len(uids) == len(tasks), "uids= needs one uid per task and n_rollouts=1")
            jobs = list(zip(tasks, uids, strict=True))
        else:
            jobs = [
                (task, f"{_task_id(task, index)}:{rollout}")
                for index, task in enumerate(tasks)
                for rollout in range(n_rollouts)
            ]
        started = perf_counter()
        workflow_class, workflow_args = self._workflow_spec()
        blocking, thread_safe = workflow_class.env_policy(workflow_args)
        workers = self.env_workers
        if workers is None:
            workers = self.n_parallel if blocking else 0
        executor = ThreadPoolExecutor(workers, thread_name_prefix="rllm-env") if workers else None
        services = WorkflowServices(
            self.model,
            sampling or self.sampling,
            EnvRunner(executor, serialize=not thread_safe),
            self.max_prompt_length,
            self.max_response_length,
        )
        pool: asyncio.Queue[Workflow] = asyncio.Queue()
        for _ in range(min(self.n_parallel, len(jobs))):
            pool.put_nowait(workflow_class.create(workflow_args))
        try:
            with _collector_for_rollouts():
                futures = [asyncio.ensure_future(self._run_episode(services, pool, task, uid)) for task, uid in jobs]
                try:
                    episodes = list(await asyncio.gather(*futures))
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise
        finally:
            # Don't wait for env calls abandoned by a timeout: they finish on their own in the background.
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
        self.metrics = summarize_episodes(episodes, perf_counter() - started) if episodes else {}
        return episodes

    # ---- one episode --------------------------------------------------------------------------------------

    def _workflow_spec(self) -> tuple[type[Workflow], dict[str, Any]]:
        """The workflow class and its arguments, read when a call starts (front doors may build them)."""
        return self.workflow_class, self.workflow_args

    async def _run_episode(self, services: WorkflowServices, pool: asyncio.Queue, task: dict, uid: str) -> Episode:
        """Attempts until one is not an infra error or the retries are spent; the last attempt is the episode."""
        retry_errors: list[str | None] = []
        attempt = 0
        while True:
            workflow = await pool.get()
            try:
                episode = await self._attempt(workflow, services, task, uid)
            finally:
                pool.put_nowait(workflow)
            failed = episode.termination_reason is TerminationReason.INFRA_ERROR
            if not failed or attempt >= self.retry_limit:
                break
            retry_errors.append(episode.info.get("error"))
            # our backoff, or the server's Retry-After when it asked for longer
            await asyncio.sleep(max(self.retry_backoff * 2**attempt, episode.info.get("retry_after_s") or 0.0))
            attempt += 1
        episode.metrics["retries"] = attempt
        episode.metrics["infra_errors"] = len(retry_errors) + int(failed)
        if retry_errors:
            episode.info["retry_errors"] = retry_errors
        if self.on_episode_done is not None:
            self.on_episode_done(episode)
        return episode

    async def _attempt(self, workflow: Workflow, services: WorkflowServices, task: dict, uid: str) -> Episode:
        started = perf_counter()
        workflow.start_episode(services, task, uid)
        timeout = self.episode_timeout
        try:
            try:
                async with asyncio.timeout(timeout) as deadline:
                    reason, returned, info = await workflow.run_episode(task, uid)
            except TimeoutError:
                if not deadline.expired():
                    raise
                reason, returned = TerminationReason.TIMEOUT, None
                info = {"error": f"episode timed out after {timeout}s (episode_timeout)", "error_site": "timeout"}
        finally:
            try:
                await workflow.cleanup()
            except Exception as exc:
                workflow.episode_info["cleanup_error"] = f"{type(exc).__name__}: {exc}"
        return workflow.build_episode(task, uid, reason, returned, info, perf_counter() - started)


_YOUNG_THRESHOLD = 10_000
_running_calls = 0  # calls running now (several event loops may run engines, each in its own thread)
_saved_thresholds: tuple[int, ...] = ()
_collector_lock = threading.Lock()


@contextlib.contextmanager
def _collector_for_rollouts():
    """The collector's settings for rollouts, until the last running call ends (module docstring). Objects made
    during the call are collected as usual; the young garbage is collected before the freeze, and garbage among
    the frozen ones (all old by then) is collected by full collections after `gc.unfreeze()`. Unless
    `rllm.runtime` enables `gc_tuning` (read as the call starts) the collector is left alone."""
    global _running_calls, _saved_thresholds
    if not runtime.options().gc_tuning:
        yield
        return
    with _collector_lock:
        if _running_calls == 0:
            # The young generations first: what gc.freeze() takes from them comes back by gc.unfreeze() straight
            # into the oldest generation, uncounted by the rule that triggers full collections (and freeze resets
            # the young count), so in a process that allocates little between calls the cyclic garbage made there
            # was never collected (the unit test: 1,000 of 1,000 kept). Collecting them walks only the young
            # objects, not the 300k frozen ones. (Not the cause of issue 53's training-floor growth: measured.)
            gc.collect(1)
            gc.freeze()
            _saved_thresholds = gc.get_threshold()
            gc.set_threshold(max(_saved_thresholds[0], _YOUNG_THRESHOLD), *_saved_thresholds[1:])
        _running_calls += 1
    try:
        yield
    finally:
        with _collector_lock:
            _running_calls -= 1
            if _running_calls == 0:
                gc.set_threshold(*_saved_thresholds)
                gc.unfreeze()


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

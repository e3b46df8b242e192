"""rLLM v0.2's `AgentWorkflowEngine`, for scripts written against rLLM:

    rollout_engine = OpenAIEngine(model=name, tokenizer=tokenizer, base_url=..., api_key="None",
                                  sampling_params={"temperature": 0.6, "top_p": 0.95})
    engine = AgentWorkflowEngine(workflow_cls=SolverJudgeWorkflow, workflow_args={"n_solutions": 2},
                                 rollout_engine=rollout_engine, config=None, n_parallel_tasks=128, retry_limit=1)
    episodes = asyncio.run(engine.execute_tasks(tasks))

It is rllm's `AgentWorkflowEngine` (one rollout core) with rLLM's constructor and `execute_tasks`:

- `rollout_engine` must be an `OpenAIEngine` (or any `rllm.engine.rollout.ClientRolloutEngine`): its client is the
  model, its `sampling_params`, `max_prompt_length` and `max_response_length` are the engine's. Each workflow is
  built as `workflow_cls(rollout_engine=..., executor=None, **workflow_args)`, as rLLM builds it; a `timeout` in
  `workflow_args` bounds each episode.
- `execute_tasks(tasks, task_ids=None)` is a coroutine returning one `Episode` per task. Episode ids are
  `"{task_id}:{k}"`, k counting the earlier tasks with the same id; without `task_ids` each task gets a fresh uuid,
  as in rLLM. Episodes come back in task order (rLLM: grouped by task id, then in completion order).
- `retry_limit` is rLLM's number of attempts of an episode that fails: infra errors (a server down, a timeout) get
  `retry_limit - 1` retries inside rllm's engine, and an episode that ended in an error (an exception in the
  workflow's code) is run again, as rLLM does, up to `retry_limit` attempts in all (`info["error_attempts"]`). With
  `raise_on_error` (rLLM's default) any episode that still ended in an error makes `execute_tasks` raise, naming its
  uid and the error.
- `n_parallel_tasks` → `n_parallel`. `config`, `episode_logger` and other keywords: errors naming them.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from rllm.compat.engine.rollout.rollout_engine import ClientRolloutEngine
from rllm.engine.workflow_engine import AgentWorkflowEngine as _Engine
from rllm.errors import RllmError
from rllm.types import Episode, TerminationReason

__all__ = ["AgentWorkflowEngine", "RolloutFailedError"]


class RolloutFailedError(RllmError):
    """An episode ended in an error and `raise_on_error` was set (rLLM's default)."""


class AgentWorkflowEngine(_Engine):
    """rLLM v0.2's workflow engine over rllm's. See the module docstring."""

    def __init__(
        self,
        workflow_cls: type,
        workflow_args: dict[str, Any] | None = None,
        rollout_engine: Any = None,
        config: Any = None,
        n_parallel_tasks: int = 128,
        retry_limit: int = 3,
        raise_on_error: bool = True,
        episode_logger: Any = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise TypeError(f"AgentWorkflowEngine() got arguments rllm does not support: {sorted(unknown)}")
        if config is not None or episode_logger is not None:
            raise ValueError(
                "config= and episode_logger= are rLLM's training hooks: train with AgentTrainer, whose "
                "run directory logs every episode (episodes.jsonl)"
            )
        if not isinstance(rollout_engine, ClientRolloutEngine):
            given = type(rollout_engine).__name__
            raise TypeError(
                "rollout_engine must be an OpenAIEngine (from rllm.engine import OpenAIEngine) or "
                f"another rllm.engine.rollout.ClientRolloutEngine, not {given}"
            )
        args = dict(workflow_args or {})
        timeout = args.get("timeout")
        super().__init__(
            workflow_class=workflow_cls,
            model=rollout_engine.client,
            workflow_args={**args, "rollout_engine": rollout_engine, "executor": None},
            sampling=rollout_engine.sampling,
            n_parallel=n_parallel_tasks,
            max_prompt_length=rollout_engine.max_prompt_length,
            max_response_length=rollout_engine.max_response_length,
            episode_timeout=float(timeout) if timeout else None,
            retry_limit=max(retry_limit - 1, 0),
        )
        self.rollout_engine = rollout_engine
        self.raise_on_error = raise_on_error
        self.attempts = max(retry_limit, 1)

    async def execute_tasks(  # type: ignore[override]
        self, tasks: Iterable[dict], task_ids: Sequence[str] | None = None, **kwargs: Any
    ) -> list[Episode]:
        if kwargs:
            raise TypeError(f"execute_tasks(): keyword arguments for workflow.run are not supported: {sorted(kwargs)}")
        tasks = list(tasks)
        ids = [str(uuid.uuid4()) for _ in tasks] if task_ids is None else [str(t) for t in task_ids]
        seen: Counter[str] = Counter()
        uids = []
        for task_id in ids:
            uids.append(f"{task_id}:{seen[task_id]}")
            seen[task_id] += 1
        try:
            episodes = await self.execute_tasks_async(tasks, uids=uids)
            for _ in range(self.attempts - 1):  # rLLM retries an episode that ended in an error, whatever raised it
                failed = [i for i, e in enumerate(episodes) if e.termination_reason is TerminationReason.ERROR]
                if not failed:
                    break
                again = await self.execute_tasks_async([tasks[i] for i in failed], uids=[uids[i] for i in failed])
                for i, episode in zip(failed, again, strict=True):
                    episode.info["error_attempts"] = episodes[i].info.get("error_attempts", 1) + 1
                    episodes[i] = episode
        finally:
            if hasattr(self.model, "aclose"):  # its HTTP session belongs to this call's event loop
                await self.model.aclose()
        failed = [
            e for e in episodes if e.termination_reason in (TerminationReason.ERROR, TerminationReason.INFRA_ERROR)
        ]
        if failed and self.raise_on_error:
            first = failed[0]
            raise RolloutFailedError(
                f"[{first.id}] rollout failed ({len(failed)} of {len(episodes)} episodes): "
                f"{first.info.get('error')}\n{first.info.get('traceback', '')}"
            )
        return episodes

    def shutdown(self) -> None:
        """rLLM frees its thread pool here; rllm's engine holds none between calls."""

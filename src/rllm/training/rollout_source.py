"""Where a training step's rollouts come from: `take(step) -> rollouts`, synchronously or pipelined.

    source = make_rollout_source(config, rollout, pending, start_step)   # rollout: step -> StepRollouts
    rollouts = await source.take(step)

- `SyncRollouts` (`rollout.max_staleness` 0): step k's rollouts are sampled when the loop asks for them, from the
  weights step k - 1 pushed.
- `RolloutPipeline` (`rollout.max_staleness` >= 1): a producer task samples later steps while the trainer updates on
  earlier ones (its docstring says which weights each step samples from).

Both answer the same four calls the loop and the step make around an update: `before_push(step)` (the push waits
for rollouts that must use the older weights), `before_save()` (a checkpoint waits for the step in flight),
`release(step)` (the new weights may be sampled) and `close(settle=...)`. `overlaps_updates` says whether the update
runs in a worker thread so that rollouts go on meanwhile.

`sample_rollouts` is what one step's sampling is (tasks, seeds, DAPO's refills, ReMax's greedy baselines); the
sampling settings are passed to each engine call, never set on the engine, so concurrent calls cannot mix them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rllm.config import TrainConfig
from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.training.advantages import group_key, informative_tasks, overlong_penalties, trajectory_reward
from rllm.types import Episode

__all__ = [
    "RolloutPipeline",
    "StepRollouts",
    "SyncRollouts",
    "TaskSampler",
    "make_rollout_source",
    "sample_rollouts",
    "step_seed",
]


@dataclass
class StepRollouts:
    """One training step's episodes, as the rollout phase hands them to the update."""

    step: int
    episodes: list[Episode]
    greedy: dict[str, float] | None  # ReMax's greedy baselines
    seconds: float
    weight_version: int  # the rollout model's version when they were sampled
    waited: float | None = None  # pipelined: how long the trainer waited for them (not part of a checkpoint)

    def to_state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "episodes": [episode.to_dict() for episode in self.episodes],
            "greedy": self.greedy,
            "seconds": self.seconds,
            "weight_version": self.weight_version,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> StepRollouts:
        return cls(
            state["step"],
            [Episode.from_dict(e) for e in state["episodes"]],
            state["greedy"],
            state["seconds"],
            state["weight_version"],
        )


class TaskSampler:
    """Hands out tasks in epochs, each a seeded shuffle of the dataset; `position` (tasks handed out so far) fully
    determines what comes next, so a resumed run sees the same tasks as an uninterrupted one."""

    def __init__(self, tasks: list[dict], seed: int, position: int = 0) -> None:
        if not tasks:
            raise ValueError("the training dataset is empty: give train_dataset rows or set data.train_size >= 1")
        self.tasks, self.seed, self.position = tasks, seed, position

    def take(self, k: int) -> list[dict]:
        out = []
        for _ in range(k):
            epoch, index = divmod(self.position, len(self.tasks))
            order = list(range(len(self.tasks)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            out.append(self.tasks[order[index]])
            self.position += 1
        return out


def step_seed(seed: int, step: int | str) -> int:
    """The sampling seed of one step (or one refill of it), from the run's seed: a resumed step samples the same."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{step}".encode(), digest_size=4).digest(), "little")


async def sample_rollouts(
    step: int, config: TrainConfig, sampler: TaskSampler, engine: AgentWorkflowEngine
) -> StepRollouts:
    """Step `step`'s episodes (and ReMax's greedy baselines) from the engine's model as it is now."""
    cfg = config
    tasks = sampler.take(cfg.trainer.tasks_per_step)
    started = time.perf_counter()
    version = engine.model.weight_version
    sampling = cfg.rollout.to_sampling(seed=step_seed(cfg.trainer.seed, step))
    episodes = await engine.execute_tasks_async(tasks, n_rollouts=cfg.rollout.n, sampling=sampling)
    for round_ in range(1, cfg.algorithm.max_sampling_rounds):  # DAPO's dynamic sampling: refill
        found = informative_tasks(episodes, cfg.algorithm, max_tokens=cfg.rollout.max_tokens)
        missing = cfg.trainer.tasks_per_step - len(found)
        if missing <= 0:
            break
        more = sampler.take(missing)
        sampling = cfg.rollout.to_sampling(seed=step_seed(cfg.trainer.seed, f"{step}:refill{round_}"))
        episodes += await engine.execute_tasks_async(more, n_rollouts=cfg.rollout.n, sampling=sampling)
        tasks += more
    greedy = await greedy_baselines(tasks, cfg, engine) if cfg.algorithm.uses_advantage("remax") else None
    return StepRollouts(step, episodes, greedy, time.perf_counter() - started, version)


async def greedy_baselines(tasks: list[dict], config: TrainConfig, engine: AgentWorkflowEngine) -> dict[str, float]:
    """ReMax: one greedy rollout per task; its reward is the baseline of the task's group (per role)."""
    sampling = config.rollout.to_sampling(validation=True, seed=config.trainer.seed)
    episodes = await engine.execute_tasks_async(tasks, sampling=sampling)
    rewards: dict[str, list[float]] = {}
    for episode in episodes:  # a role with several trajectories (k solvers): the mean of their rewards
        for trajectory in episode.trajectories:
            reward = trajectory_reward(episode, trajectory) + sum(
                overlong_penalties(trajectory, config.algorithm, config.rollout.max_tokens)
            )
            rewards.setdefault(group_key(episode, trajectory), []).append(reward)
    return {key: sum(values) / len(values) for key, values in rewards.items()}


Rollout = Callable[[int], Awaitable[Any]]  # step -> what the step trains on (StepRollouts; SFT's examples)


def make_rollout_source(
    config: TrainConfig, rollout: Rollout, pending: dict[int, StepRollouts], start_step: int
) -> SyncRollouts | RolloutPipeline:
    """The source `rollout.max_staleness` asks for. `pending`: rollouts sampled but not yet trained (a resumed
    pipelined run's come from its checkpoint), shared with the trainer, which saves them."""
    if config.rollout.max_staleness:
        return RolloutPipeline(config, rollout, pending, start_step)
    return SyncRollouts(rollout)


class SyncRollouts:
    """Each step's rollouts sampled when the step asks for them: nothing runs beside an update."""

    overlaps_updates = False

    def __init__(self, rollout: Rollout) -> None:
        self.rollout = rollout

    async def take(self, step: int) -> Any:
        return await self.rollout(step)

    async def before_push(self, step: int) -> None:
        """Nothing is being sampled: the push may happen now."""

    async def before_save(self) -> None:
        """Nothing is in flight: the checkpoint may be written now."""

    def release(self, step: int) -> None:
        """The next `take` samples from whatever the rollout model holds then."""

    async def close(self, *, settle: bool) -> None:
        """No producer to stop."""


class RolloutPipeline:
    """Asynchronous training (`rollout.max_staleness` = s >= 1): a producer task samples the rollouts of later
    steps while the trainer updates on earlier ones.

    The rollouts of step j are sampled with the weights pushed after step j - 1 - s (the initial ones for the first
    s + 1 steps), never newer and never older, so every token of step j is exactly s versions behind the weights it
    is trained from (fewer in the first steps), and a run is as reproducible as a synchronous one. The rollout model
    holds one version at a time: the push after step k waits until the rollouts of steps <= k + s, which need the
    older weights, are done (`before_push`), and the producer starts step k + s + 1 only once the trainer released
    the new weights (after validating and checkpointing them). At most s steps of rollouts wait for the update, so
    memory stays bounded. Finished but untrained rollouts are part of every checkpoint (`pending`, the trainer's
    `pending_rollouts`): a resumed run trains exactly the episodes the uninterrupted one would have.

    `rollout.partial_rollouts`: the push does not wait; the step in flight goes on with the new weights (its tokens
    then span two versions; the oldest bounds the staleness). A checkpoint waits for that step to finish
    (`before_save`), so nothing sampled is lost or sampled twice, but the run is no longer reproducible bit for bit.
    """

    overlaps_updates = True  # the update runs in a worker thread; the event loop keeps sampling meanwhile

    def __init__(
        self, config: TrainConfig, rollout: Rollout, pending: dict[int, StepRollouts], start_step: int
    ) -> None:
        self.rollout, self.pending = rollout, pending
        self.staleness = config.rollout.max_staleness
        self.total = config.trainer.total_steps
        self.partial = config.rollout.partial_rollouts
        self.released = start_step  # the step whose weights the rollout model holds and may sample with
        self.in_flight: int | None = None  # the step being sampled
        self.next_step = max(pending, default=start_step) + 1
        self.changed = asyncio.Condition()
        self.producer = asyncio.create_task(self._produce())

    async def _produce(self) -> None:
        try:
            while self.next_step <= self.total:
                step = self.next_step
                async with self.changed:
                    await self.changed.wait_for(lambda step=step: self.released >= step - 1 - self.staleness)
                self.in_flight = step
                rollouts = await self.rollout(step)
                async with self.changed:
                    self.pending[step] = rollouts
                    self.next_step, self.in_flight = step + 1, None
                    self.changed.notify_all()
        finally:
            async with self.changed:
                self.changed.notify_all()  # a waiter sees the producer's end (or its error) at once

    async def _wait(self, ready: Callable[[], bool]) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: ready() or self.producer.done())
        if not ready():
            self.producer.result()  # re-raise the producer's error
            raise RuntimeError("the rollout producer stopped before the trainer's step")  # a bug, never expected

    async def take(self, step: int) -> StepRollouts:
        started = time.perf_counter()
        await self._wait(lambda: step in self.pending)
        rollouts = self.pending.pop(step)
        rollouts.waited = time.perf_counter() - started
        return rollouts

    async def before_push(self, step: int) -> None:
        """Until the rollouts that must use the weights before step `step`'s update are sampled (partial rollouts:
        no wait)."""
        if self.partial:
            return
        last = min(step + self.staleness, self.total)
        await self._wait(lambda: self.next_step > last)

    async def before_save(self) -> None:
        """Until no step is being sampled (the producer waits for its release, or has sampled every step): partial
        rollouts' step in flight is finished, then saved."""
        await self._wait(lambda: self.in_flight is None)

    def release(self, step: int) -> None:
        """The weights pushed after step `step` may be sampled from."""
        self.released = step

        async def notify() -> None:
            async with self.changed:
                self.changed.notify_all()

        asyncio.get_running_loop().create_task(notify())

    async def close(self, *, settle: bool) -> None:
        """Stop the producer, after the step it is sampling (partial rollouts) when `settle`: the final checkpoint
        counts that step's tasks as taken. Without it (the run failed) that step is dropped; the last checkpoint
        was saved while no step was in flight."""
        if settle and not self.producer.done():
            await self.before_save()
        self.producer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.producer

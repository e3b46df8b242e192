"""The rollout sources without a model: which weights each step's rollouts are sampled from (synchronously the
newest; pipelined exactly `rollout.max_staleness` versions behind), what a resumed pipeline samples, and the
sampling each engine call is given."""

from __future__ import annotations

import asyncio

import pytest

from rllm.config import TrainConfig, override_config
from rllm.training.rollout_source import (
    RolloutPipeline,
    StepRollouts,
    SyncRollouts,
    TaskSampler,
    make_rollout_source,
    sample_rollouts,
    step_seed,
)


def config(*overrides: str) -> TrainConfig:
    return override_config(TrainConfig(), ["trainer.total_steps=5", *overrides], "test")


def drive(cfg: TrainConfig, pending: dict | None = None, start_step: int = 0) -> dict[int, int]:
    """The trainer's loop around a source: take, (update), push, release. Returns {step: the version released
    when that step's sampling started}."""
    sampled_with: dict[int, int] = {}
    released = {"version": start_step}

    async def rollout(step: int) -> StepRollouts:
        sampled_with[step] = released["version"]
        await asyncio.sleep(0)  # let the trainer's side run between two steps' sampling
        return StepRollouts(step, [], None, 0.0, released["version"])

    async def loop() -> None:
        source = make_rollout_source(cfg, rollout, {} if pending is None else pending, start_step)
        for step in range(start_step + 1, cfg.trainer.total_steps + 1):
            rollouts = await source.take(step)
            assert rollouts.step == step
            await source.before_push(step)
            released["version"] = step  # the push after step `step`
            source.release(step)
        await source.close(settle=True)

    asyncio.run(loop())
    return sampled_with


def test_synchronous_steps_sample_from_the_weights_of_the_step_before():
    assert isinstance(make_rollout_source(config(), None, {}, 0), SyncRollouts)
    assert drive(config()) == {1: 0, 2: 1, 3: 2, 4: 3, 5: 4}


@pytest.mark.parametrize("staleness", [1, 2])
def test_pipelined_steps_sample_exactly_max_staleness_versions_behind(staleness):
    sampled_with = drive(config(f"rollout.max_staleness={staleness}"))
    assert sampled_with == {step: max(0, step - 1 - staleness) for step in range(1, 6)}


def test_a_resumed_pipeline_trains_its_pending_rollouts_before_sampling_the_next_step():
    pending = {3: StepRollouts(3, [], None, 0.0, 1)}  # sampled before the checkpoint of step 2, not yet trained
    sampled_with = drive(config("rollout.max_staleness=1"), pending, start_step=2)
    assert sampled_with == {4: 2, 5: 3}  # step 3 is not sampled again


def test_a_failed_rollout_reaches_the_step_waiting_for_it():
    async def run() -> None:
        async def broken(step: int) -> StepRollouts:
            raise ValueError(f"no rollouts for step {step}")

        source = RolloutPipeline(config("rollout.max_staleness=1"), broken, {}, 0)
        with pytest.raises(ValueError, match="no rollouts for step 1"):
            await source.take(1)  # the producer's error, not a wait forever
        assert source.producer.done()

    asyncio.run(run())


class RecordingEngine:
    """What `sample_rollouts` asks of the engine: its model's weight version, and one call per batch of tasks."""

    class model:
        weight_version = 7

    def __init__(self) -> None:
        self.calls: list[tuple[list, int, object]] = []

    async def execute_tasks_async(self, tasks, n_rollouts=1, *, sampling=None):
        self.calls.append(([task["id"] for task in tasks], n_rollouts, sampling))
        return []


def test_a_step_samples_its_tasks_with_its_own_seed_given_to_the_call():
    cfg = config("trainer.tasks_per_step=2", "rollout.n=3")
    tasks = [{"id": f"t{i}"} for i in range(4)]
    engine = RecordingEngine()
    rollouts = asyncio.run(sample_rollouts(4, cfg, TaskSampler(tasks, cfg.trainer.seed), engine))
    [(ids, n, sampling)] = engine.calls
    assert ids == [task["id"] for task in TaskSampler(tasks, cfg.trainer.seed).take(2)] and n == 3
    assert sampling == cfg.rollout.to_sampling(seed=step_seed(cfg.trainer.seed, 4))
    assert (rollouts.step, rollouts.weight_version, rollouts.greedy) == (4, 7, None)

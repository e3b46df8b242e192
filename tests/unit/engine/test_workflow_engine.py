"""AgentWorkflowEngine + Workflow: ordering, grouping, retries, every termination reason, post-processing hooks."""

from __future__ import annotations

import asyncio

import pytest

from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.errors import InfraError, PolicyError
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.types import Episode, Step, TerminationReason, Trajectory
from rllm.workflows import TerminationEvent, Workflow

R = TerminationReason


class EchoWorkflow(Workflow):
    """One model call per task; the step reward is `task["reward"]` (default 1). `task["delay"]` sleeps first, so
    tests can make rollouts finish out of order; `task["raise"]` raises it after the call."""

    instances = 0

    def __init__(self, role: str = "agent") -> None:
        type(self).instances += 1
        self.role = role

    def reset(self, task, uid):
        self.resets = getattr(self, "resets", 0) + 1

    async def run(self, task, uid):
        await asyncio.sleep(task.get("delay", 0.0))
        messages = [{"role": "user", "content": f"task {task.get('id')}"}]
        trajectory = Trajectory(name=self.role)
        self.commit(trajectory)
        output = await self.generate(messages)
        trajectory.steps.append(Step(chat_completions=messages, model_output=output, reward=task.get("reward", 1.0)))
        if "raise" in task:
            raise task["raise"]


def engine_for(workflow_class=EchoWorkflow, model=None, **kwargs) -> AgentWorkflowEngine:
    kwargs.setdefault("retry_backoff", 0.0)
    return AgentWorkflowEngine(workflow_class=workflow_class, model=model or FakeModel("ok"), **kwargs)


def only(episodes: list[Episode]) -> Episode:
    assert len(episodes) == 1
    return episodes[0]


# ---- ordering, grouping, pool ---------------------------------------------------------------------------------


def test_episodes_come_back_in_task_order_grouped_by_task_whatever_order_they_finish():
    tasks = [{"id": "slow", "delay": 0.05}, {"id": "fast"}, {"uid": "u7", "delay": 0.02}, {}]
    episodes = engine_for().execute_tasks(tasks, n_rollouts=2)
    assert [ep.id for ep in episodes] == ["slow:0", "slow:1", "fast:0", "fast:1", "u7:0", "u7:1", "3:0", "3:1"]
    assert [ep.task_id for ep in episodes[::2]] == ["slow", "fast", "u7", "3"]
    assert all(ep.termination_reason is R.ENV_DONE and ep.is_correct for ep in episodes)


def test_pool_bounds_concurrency_and_reuses_instances():
    in_flight, peak = 0, 0

    def delay(prompt, sampling):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        return 0.01

    class Counting(EchoWorkflow):
        async def run(self, task, uid):
            try:
                await super().run(task, uid)
            finally:
                nonlocal in_flight
                in_flight -= 1

    Counting.instances = 0
    engine = engine_for(Counting, FakeModel("ok", delay=delay), n_parallel=3)
    episodes = engine.execute_tasks([{"id": i} for i in range(5)], n_rollouts=2)
    assert len(episodes) == 10 and peak == 3
    assert Counting.instances == 3  # a pool of n_parallel instances, each reused (reset per episode)


def test_the_collector_is_tuned_for_a_call_and_put_back_when_the_last_call_ends(tuned_runtime):
    """gc.freeze for the call (full collections walked every object of the process, stalling all rollouts) and a
    higher young-generation threshold, undone when the last of the concurrent calls ends, so no garbage is kept for
    good and the process's own settings come back. Only where rllm.runtime enables gc_tuning (the CLI does)."""
    import gc

    seen = []

    class Freezes(EchoWorkflow):
        async def run(self, task, uid):
            await super().run(task, uid)  # task 1 sleeps first: the call of task 2 has ended by now
            seen.append((task["id"], gc.get_freeze_count(), gc.get_threshold()[0]))

    assert gc.get_freeze_count() == 0, "something else froze the heap: this test cannot tell"
    thresholds = gc.get_threshold()

    async def two_calls_at_once():
        engine = engine_for(Freezes)
        return await asyncio.gather(
            engine.execute_tasks_async([{"id": 1, "delay": 0.05}]), engine.execute_tasks_async([{"id": 2}])
        )

    asyncio.run(two_calls_at_once())
    assert [task for task, *_ in seen] == [2, 1] and all(frozen > 0 for _, frozen, _ in seen)
    assert all(young == max(thresholds[0], 10_000) for *_, young in seen)
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds


def test_without_the_runtime_enabled_a_call_leaves_the_collector_alone():
    """A library user who did not opt in (rllm.runtime.enable) keeps the collector as the program set it, during
    the call too: its settings are the whole process's."""
    import gc

    seen = []

    class Looks(EchoWorkflow):
        async def run(self, task, uid):
            await super().run(task, uid)
            seen.append((gc.get_freeze_count(), gc.get_threshold()))

    thresholds = gc.get_threshold()
    assert gc.get_freeze_count() == 0, "something else froze the heap: this test cannot tell"
    engine_for(Looks).execute_tasks([{"id": 1}, {"id": 2}])
    assert seen == [(0, thresholds)] * 2


def test_garbage_made_between_calls_is_collected_not_kept_for_good(tuned_runtime):
    """Each call freezes the heap; what the freeze took from the young generations came back into the oldest one
    uncounted, so cyclic garbage made between calls (a training step's) was never collected and a long run's
    resident floor grew (issue 53). Now at most the garbage made since the last call is alive."""
    import gc
    import weakref

    class Cycle:
        def __init__(self) -> None:
            self.me = self  # freed only by the cycle collector

    engine = engine_for()
    kept: list[weakref.ref] = []
    for _call in range(20):
        kept += [weakref.ref(Cycle()) for _ in range(50)]  # the step between two calls
        engine.execute_tasks([{"id": 1}])
    alive = sum(ref() is not None for ref in kept)
    assert alive <= 50, f"{alive} of {len(kept)} garbage cycles outlived the calls after them"
    assert gc.get_freeze_count() == 0


def test_workflow_class_must_be_a_workflow():
    with pytest.raises(ValueError, match="subclass of rllm.workflows.Workflow"):
        AgentWorkflowEngine(workflow_class=dict, model=FakeModel("x"))
    with pytest.raises(ValueError, match="n_parallel"):
        engine_for(n_parallel=0)


def test_engine_metrics_summarise_roles_terminations_and_times():
    class TwoRoles(Workflow):
        async def run(self, task, uid):
            for role, reward in (("solver", 1.0), ("solver", 0.0), ("judge", task["judge"])):
                output = await self.generate([{"role": "user", "content": role}], conversation=f"{role}{reward}")
                self.commit(Trajectory(name=role, steps=[Step(model_output=output, reward=reward)]))
            if task["judge"] < 0:
                raise TerminationEvent(R.MAX_TURNS)

    engine = engine_for(TwoRoles)
    episodes = engine.execute_tasks([{"id": "a", "judge": 1.0}, {"id": "b", "judge": -1.0}])
    first, second = episodes[0].metrics, episodes[1].metrics
    assert first["role/solver/reward_mean"] == 0.5 and first["role/solver/success_rate"] == 0.5
    assert first["role/solver/count"] == 2 and second["role/judge/reward_mean"] == -1.0
    metrics = engine.metrics  # the same vocabulary over the whole call
    assert (metrics["role/solver/count"], metrics["role/solver/reward_mean"], metrics["role/solver/success_rate"]) == (
        4,
        0.5,
        0.5,
    )
    assert (metrics["role/judge/count"], metrics["role/judge/reward_mean"], metrics["role/judge/success_rate"]) == (
        2,
        0.0,
        0.5,
    )
    assert metrics["termination/env_done"] == 0.5 and metrics["termination/max_turns"] == 0.5
    assert metrics["time_model_s_mean"] >= 0 and "time_reward_s_mean" in metrics


# ---- termination reasons ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", [r for r in R if r is not R.INFRA_ERROR])
def test_a_termination_event_ends_the_episode_with_its_reason_and_keeps_the_steps(reason):
    episode = only(engine_for().execute_tasks([{"id": "t", "raise": TerminationEvent(reason, "why")}]))
    assert episode.termination_reason is reason
    assert len(episode.trajectories[0].steps) == 1  # committed before the event: kept
    if reason is R.TIMEOUT:
        assert episode.info["error"] == "why" and episode.info["error_site"] == "timeout"
    else:
        assert episode.info["termination_message"] == "why" and "traceback" not in episode.info


def test_infra_error_is_retried_then_kept_with_every_attempt_counted():
    model = FakeModel([InfraError("503"), "ok"])
    episode = only(engine_for(model=model, retry_limit=2).execute_tasks([{"id": "t"}]))
    assert episode.termination_reason is R.ENV_DONE and episode.metrics["retries"] == 1
    assert episode.info["retry_errors"] == ["InfraError: 503"]

    down = FakeModel(lambda prompt, sampling: InfraError("down"))
    episode = only(engine_for(model=down, retry_limit=2).execute_tasks([{"id": "t"}]))
    assert episode.termination_reason is R.INFRA_ERROR and not episode.is_correct
    assert len(down.calls) == 3 and episode.metrics["infra_errors"] == 3 and episode.info["error_site"] == "model"


def test_unexpected_exception_is_error_with_traceback_and_not_retried():
    episode = only(engine_for(retry_limit=3).execute_tasks([{"id": "t", "raise": KeyError("oops")}]))
    assert episode.termination_reason is R.ERROR and episode.metrics["retries"] == 0
    assert episode.info["error_site"] == "workflow" and "KeyError" in episode.info["traceback"]
    assert "in run" in episode.info["traceback"]


def test_a_sampling_override_that_is_no_sampling_setting_fails_the_episode_naming_it():
    """`generate(thread=...)` (a keyword from before 0.1.0) or a typo would otherwise sample without it, silently."""

    class Typo(EchoWorkflow):
        async def run(self, task, uid):
            self.commit(Trajectory(name=self.role))
            await self.generate([{"role": "user", "content": "hi"}], **task["sampling"])

    model = FakeModel("ok")
    engine = engine_for(Typo, model=model)
    bad, out_of_range, good = engine.execute_tasks(
        [
            {"sampling": {"thread": "x", "max_tokens": 4}},
            {"sampling": {"temperature": -1.0}},
            {"sampling": {"top_k": 3}},
        ]
    )
    assert bad.termination_reason is R.ERROR and len(model.calls) == 1  # only the good one reached the model
    assert (
        "Typo.generate() got thread: not a sampling setting; the settings are temperature, top_p" in bad.info["error"]
    )
    assert out_of_range.termination_reason is R.ERROR and "temperature" in out_of_range.info["error"]
    assert good.termination_reason is not R.ERROR and model.calls[0].sampling.top_k == 3


def test_policy_error_is_the_models_fault_and_not_retried():
    episode = only(engine_for(retry_limit=3).execute_tasks([{"id": "t", "raise": PolicyError("bad format")}]))
    assert episode.termination_reason is R.POLICY_ERROR and episode.metrics["retries"] == 0


def test_env_crash_is_infra_and_reward_crash_is_error():
    class Calls(Workflow):
        async def run(self, task, uid):
            await (self.call_env if task["site"] == "env" else self.call_reward)(_crash)

    engine = engine_for(Calls, retry_limit=1)
    env, reward = engine.execute_tasks([{"site": "env"}, {"site": "reward"}])
    assert env.termination_reason is R.INFRA_ERROR and env.info["error_site"] == "env" and env.metrics["retries"] == 1
    assert reward.termination_reason is R.ERROR and reward.info["error_site"] == "reward"


def _crash():
    raise RuntimeError("crashed")


def test_episode_timeout_keeps_what_was_committed():
    class Slow(Workflow):
        async def run(self, task, uid):
            trajectory = Trajectory()
            self.commit(trajectory)
            for _ in range(100):
                trajectory.steps.append(Step(model_output=await self.generate([{"role": "user", "content": "x"}])))

    model = FakeModel("ok", delay=0.02)
    episode = only(engine_for(Slow, model, episode_timeout=0.15).execute_tasks([{}]))
    assert episode.termination_reason is R.TIMEOUT and "episode timed out" in episode.info["error"]
    assert 1 <= len(episode.trajectories[0].steps) < 100


def test_the_length_budget_ends_a_conversation_with_max_prompt_length():
    model = FakeModel("ok", tokenizer=FakeTokenizer())
    episode = only(engine_for(model=model, max_prompt_length=3).execute_tasks([{"id": "a long task name"}]))
    assert episode.termination_reason is R.MAX_PROMPT_LENGTH and model.calls == []


def test_cleanup_runs_after_every_attempt_and_its_error_is_reported():
    closed = []

    class Leaky(EchoWorkflow):
        async def cleanup(self):
            closed.append(True)
            raise OSError("socket already closed")

    episodes = engine_for(Leaky, model=FakeModel([InfraError("x"), "ok"]), retry_limit=1).execute_tasks([{}])
    assert len(closed) == 2 and only(episodes).info["cleanup_error"] == "OSError: socket already closed"


# ---- post-processing -------------------------------------------------------------------------------------------


def test_default_trajectory_reward_is_the_sum_of_step_rewards_and_step_rewards_stay_as_given():
    class ThreeSteps(Workflow):
        async def run(self, task, uid):
            self.commit(Trajectory(steps=[Step(reward=r) for r in (1.0, 0.0, 2.0)]))

    trajectory = only(engine_for(ThreeSteps).execute_tasks([{}])).trajectories[0]
    assert trajectory.reward == 3.0
    assert [s.reward for s in trajectory.steps] == [1.0, 0.0, 2.0]  # discounting is the trainer's, not stored here


def test_a_workflow_that_still_discounts_is_told_where_discounting_went():
    with pytest.raises(TypeError, match=r"Discounted\.gamma.*algorithm.stepwise: true and algorithm.gamma"):

        class Discounted(Workflow):
            gamma = 0.5


def test_hooks_override_reward_correctness_and_metrics_and_a_returned_episode_is_merged():
    class Custom(Workflow):
        async def run(self, task, uid):
            kept = Trajectory(name="a", steps=[Step(reward=1.0)])
            self.commit(kept)
            return Episode(
                id=uid,
                trajectories=[kept, Trajectory(name="b", steps=[Step(reward=4.0)])],
                metrics={"mine": 7},
                info={"note": "x"},
            )

        def compute_trajectory_reward(self, trajectory):
            return 10 * trajectory.total_step_reward()

        def assign_episode_correctness(self, episode):
            return len(episode.trajectories) == 2

        def collect_metrics(self, episode):
            return {"total": sum(t.reward for t in episode.trajectories)}

    episode = only(engine_for(Custom).execute_tasks([{}]))
    assert [t.name for t in episode.trajectories] == ["a", "b"]  # the trajectory both committed and returned: once
    assert [t.reward for t in episode.trajectories] == [10.0, 40.0] and episode.is_correct
    assert episode.metrics["total"] == 50.0 and episode.metrics["mine"] == 7 and episode.info["note"] == "x"


def test_sampling_given_to_a_call_is_that_calls_only_and_the_engine_keeps_its_own():
    """Two concurrent calls on one engine (a training step's rollouts beside a validation) each sample with the
    settings they were given; a call given none samples with the engine's, which no call changes."""
    model = FakeModel(lambda prompt, sampling: f"{sampling.temperature} {sampling.max_tokens}", delay=0.01)
    engine = engine_for(model=model, sampling=SamplingParams(temperature=0.7, max_tokens=5))

    async def both():
        hot = engine.execute_tasks_async([{"id": "train"}], sampling=SamplingParams(temperature=1.0, max_tokens=9))
        greedy = engine.execute_tasks_async([{"id": "val"}], sampling=SamplingParams(temperature=0.0, max_tokens=3))
        return await asyncio.gather(hot, greedy)

    (trained, validated), default = asyncio.run(both()), engine.execute_tasks([{"id": "default"}])
    episodes = [*trained, *validated, *default]
    seen = {episode.task_id: episode.trajectories[0].steps[0].model_output.text for episode in episodes}
    assert seen == {"train": "1.0 9", "val": "0.0 3", "default": "0.7 5"}, seen
    assert (engine.sampling.temperature, engine.sampling.max_tokens) == (0.7, 5)


def test_each_conversation_gets_its_own_reproducible_seeds():
    class Threads(Workflow):
        async def run(self, task, uid):
            for name in ("main", "main", "other"):
                await self.generate([{"role": "user", "content": name}], conversation=name)

    def seeds():
        model = FakeModel("ok")
        engine_for(Threads, model, sampling=SamplingParams(seed=9)).execute_tasks([{"id": "x"}], n_rollouts=2)
        return [call.sampling.seed for call in model.calls]

    first = seeds()
    assert first == seeds() and len(set(first)) == 6  # 2 rollouts x 3 calls, no two alike

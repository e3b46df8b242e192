"""AgentExecutionEngine: ordering, termination reasons, retries, timeouts, token exactness, concurrency."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter

import pytest

from rllm.agents.base import BaseAgent
from rllm.engine.execution import AgentExecutionEngine
from rllm.errors import InfraError, PolicyError
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.types import Action, Episode, ModelOutput, TerminationReason
from tests.support.envs import CounterEnv

R = TerminationReason


def make_engine(model, log=None, **kwargs) -> AgentExecutionEngine:
    env_args = {"log": log if log is not None else Counter(), **kwargs.pop("env_args", {})}
    kwargs.setdefault("retry_backoff", 0.0)
    return AgentExecutionEngine(agent_class=BaseAgent, env_class=CounterEnv, model=model, env_args=env_args, **kwargs)


def only(episodes: list[Episode]) -> Episode:
    assert len(episodes) == 1
    return episodes[0]


# ---- ordering and the basic loop -------------------------------------------------------------------------------


def test_episodes_in_task_order_grouped_by_task_even_when_finishing_out_of_order():
    finished: list[str] = []
    # Task "a" is slow, "b" instant: b's episodes finish first.
    model = FakeModel("yes", delay=lambda prompt, sampling: 0.05 if prompt[0]["content"] == "task a" else 0.0)
    engine = make_engine(model, max_steps=2, on_episode_done=lambda ep: finished.append(ep.id))
    episodes = engine.execute_tasks([{"id": "a", "k": 2}, {"id": "b", "k": 2}, {"k": 2}], n_rollouts=3)
    assert [ep.id for ep in episodes] == ["a:0", "a:1", "a:2", "b:0", "b:1", "b:2", "2:0", "2:1", "2:2"]
    assert finished.index("b:0") < finished.index("a:0")
    assert sorted(finished) == sorted(ep.id for ep in episodes)
    assert episodes[0].task["id"] == "a" and (episodes[0].task_id, episodes[2].rollout_idx) == ("a", 2)


def test_uid_is_used_as_task_id():
    episodes = make_engine(FakeModel("yes")).execute_tasks([{"uid": "u7", "k": 1}])
    assert only(episodes).id == "u7:0"


def test_env_done_keeps_step_rewards_and_trajectory_reward():
    model = FakeModel(["no", "no", "yes"])
    episode = only(make_engine(model, max_steps=5).execute_tasks([{"id": "t", "k": 3}]))
    assert episode.termination_reason is R.ENV_DONE
    trajectory = episode.trajectories[0]
    assert trajectory.name == "agent"
    assert [s.reward for s in trajectory.steps] == [0.0, 0.0, 1.0]
    assert [s.done for s in trajectory.steps] == [False, False, True]
    assert [s.action for s in trajectory.steps] == ["no", "no", "yes"]
    assert trajectory.steps[0].observation == "obs 1" and trajectory.steps[2].info == {"t": 3}
    assert trajectory.steps[1].chat_completions[-1] == {"role": "user", "content": "obs 1"}
    assert trajectory.reward == 1.0 and episode.is_correct
    assert episode.metrics["steps"] == 3 and episode.metrics["retries"] == 0
    assert {"time_model", "time_env", "time_total", "token_mismatch", "infra_errors"} <= set(episode.metrics)


def test_max_steps_gives_max_turns():
    episode = only(make_engine(FakeModel("no"), max_steps=2).execute_tasks([{"k": 10}]))
    assert episode.termination_reason is R.MAX_TURNS
    assert episode.metrics["steps"] == 2 and not episode.is_correct


def test_success_info_decides_correctness():
    class SuccessEnv(CounterEnv):
        def step(self, action):
            obs, reward, done, info = super().step(action)
            return obs, reward, done, {**info, "success": False}

    engine = make_engine(FakeModel("yes"), max_steps=1)
    engine.env_class = SuccessEnv
    episode = only(engine.execute_tasks([{"k": 1}]))
    assert episode.trajectories[0].reward == 1.0 and not episode.is_correct


def test_env_built_from_env_args_merged_with_task_and_always_closed():
    log = Counter()
    engine = make_engine(FakeModel("yes"), log, env_args={"k": 5, "keyword": "ye"}, max_steps=9)
    episodes = engine.execute_tasks([{"id": "x", "k": 1}, {"id": "y"}])
    assert [ep.metrics["steps"] for ep in episodes] == [1, 5]  # the task's k beats env_args' k
    assert log["close"] == 2


def test_episode_json_round_trip():
    model = FakeModel("yes", tokenizer=FakeTokenizer())
    episode = only(make_engine(model, max_steps=3).execute_tasks([{"id": "j", "k": 2}]))
    assert Episode.model_validate_json(episode.model_dump_json()) == episode


def test_sync_api_refuses_a_running_loop():
    engine = make_engine(FakeModel("yes"))

    async def inside():
        engine.execute_tasks([{"k": 1}])

    with pytest.raises(RuntimeError, match="execute_tasks_async"):
        asyncio.run(inside())


def test_engine_fills_in_a_step_the_agent_did_not_record():
    class BareAgent(BaseAgent):
        def update_from_model(self, output: ModelOutput) -> Action:
            self.messages.append({"role": "assistant", "content": output.text})
            return Action(action=output.text)

    engine = make_engine(FakeModel("yes"), max_steps=3)
    engine.agent_class = BareAgent
    episode = only(engine.execute_tasks([{"k": 2}]))
    steps = episode.trajectories[0].steps
    assert len(steps) == 2 and steps[0].model_output.text == "yes" and steps[1].reward == 1.0
    assert steps[1].chat_completions == [
        {"role": "user", "content": "task ?"},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "obs 1"},
    ]


# ---- timeouts ------------------------------------------------------------------------------------------------


def test_step_timeout_keeps_steps_so_far():
    # The second model call of the rollout hangs.
    model = FakeModel("no", delay=lambda prompt, sampling: 5.0 if len(prompt) > 1 else 0.0)
    log = Counter()
    episode = only(make_engine(model, log, step_timeout=0.1, max_steps=5).execute_tasks([{"k": 9}]))
    assert episode.termination_reason is R.TIMEOUT
    assert episode.metrics["steps"] == 1 and "step timed out" in episode.info["error"]
    assert "model" in episode.info["error"]
    assert log["close"] == 1 and episode.metrics["retries"] == 0


def test_step_timeout_covers_a_slow_env_step():
    log = Counter()
    engine = make_engine(FakeModel("no"), log, step_timeout=0.05, env_args={"step_sleep": 0.3})
    episode = only(engine.execute_tasks([{"k": 9}]))
    assert episode.termination_reason is R.TIMEOUT and log["close"] == 1


def test_episode_timeout():
    model = FakeModel("no", delay=0.03)
    episode = only(make_engine(model, episode_timeout=0.2, max_steps=100).execute_tasks([{"k": 100}]))
    assert episode.termination_reason is R.TIMEOUT and "episode timed out" in episode.info["error"]
    assert 1 <= episode.metrics["steps"] < 10


# ---- errors and retries --------------------------------------------------------------------------------------


def test_env_that_fails_once_is_retried_and_succeeds():
    log = Counter()
    engine = make_engine(FakeModel("yes"), log, env_args={"fail_step": 1}, retry_limit=2)
    episode = only(engine.execute_tasks([{"id": "r", "k": 1}]))
    assert episode.termination_reason is R.ENV_DONE and episode.is_correct
    assert episode.metrics["retries"] == 1 and episode.metrics["infra_errors"] == 1
    assert "env crashed" in episode.info["retry_errors"][0]
    assert log["close"] == 2  # one env per attempt, each closed


def test_env_that_always_fails_is_kept_as_infra_error():
    log = Counter()
    engine = make_engine(FakeModel("yes"), log, env_args={"fail_step": 99}, retry_limit=2, retry_backoff=0.01)
    episode = only(engine.execute_tasks([{"id": "bad", "k": 1}]))
    assert episode.termination_reason is R.INFRA_ERROR and not episode.is_correct
    assert episode.metrics["retries"] == 2 and episode.metrics["infra_errors"] == 3
    assert "env crashed on bad" in episode.info["error"] and episode.info["error_site"] == "env"
    assert log["close"] == 3


def test_env_that_fails_to_build_is_an_infra_error():
    class Unbuildable(CounterEnv):
        @classmethod
        def from_dict(cls, task):
            raise ValueError("no such dataset row")

    engine = make_engine(FakeModel("yes"), retry_limit=1)
    engine.env_class = Unbuildable
    episode = only(engine.execute_tasks([{"k": 1}]))
    assert episode.termination_reason is R.INFRA_ERROR and "no such dataset row" in episode.info["error"]
    assert episode.trajectories[0].steps == []


def test_model_infra_error_is_retried():
    calls = Counter()

    def flaky(prompt, sampling):
        calls["n"] += 1
        return InfraError("503") if calls["n"] == 1 else "yes"

    episode = only(make_engine(FakeModel(flaky), retry_limit=2).execute_tasks([{"k": 1}]))
    assert episode.termination_reason is R.ENV_DONE and episode.metrics["retries"] == 1

    down = FakeModel(lambda prompt, sampling: InfraError("server down"))
    episode = only(make_engine(down, retry_limit=2).execute_tasks([{"k": 1}]))
    assert episode.termination_reason is R.INFRA_ERROR and len(down.calls) == 3
    assert episode.info["error"] == "InfraError: server down"


def test_policy_error_is_not_retried():
    class StrictAgent(BaseAgent):
        def parse_action(self, output):
            if "bad" in output.text:
                raise PolicyError("unparsable reply")
            return output.text

    engine = make_engine(FakeModel(["yes", "bad"]), max_steps=5)
    engine.agent_class = StrictAgent
    episode = only(engine.execute_tasks([{"k": 5}]))
    assert episode.termination_reason is R.POLICY_ERROR and episode.metrics["retries"] == 0
    assert "unparsable" in episode.info["error"]
    # The rejected reply is kept as a step (with its tokens), so the policy-error reward has something to train.
    assert episode.metrics["steps"] == 2
    assert episode.trajectories[0].steps[1].model_output.text == "bad"
    assert episode.trajectories[0].steps[1].action is None


def test_agent_bug_is_error_with_traceback():
    class BuggyAgent(BaseAgent):
        def parse_action(self, output):
            return 1 / 0

    engine = make_engine(FakeModel("yes"))
    engine.agent_class = BuggyAgent
    episode = only(engine.execute_tasks([{"k": 2}]))
    assert episode.termination_reason is R.ERROR and episode.metrics["retries"] == 0
    assert "ZeroDivisionError" in episode.info["traceback"] and "parse_action" in episode.info["traceback"]


def test_an_agent_whose_trajectory_is_not_one_fails_its_episode_only_naming_the_class_and_property():
    class SometimesNoTrajectory(BaseAgent):
        """Loses its trajectory on task 1 only (a user's bug), after the first observation."""

        def update_from_env(self, observation, reward, done, info):
            self.lost = observation == "task 1"
            super().update_from_env(observation, reward, done, info)

        @property
        def trajectory(self):
            return None if getattr(self, "lost", False) else self._trajectory

    engine = make_engine(FakeModel("yes"))
    engine.agent_class = SometimesNoTrajectory
    episodes = engine.execute_tasks([{"id": i, "k": 1} for i in range(3)])
    assert [ep.termination_reason for ep in episodes] == [R.ENV_DONE, R.ERROR, R.ENV_DONE]
    assert episodes[1].info["error"].startswith("AgentOutputError: SometimesNoTrajectory.trajectory returned NoneType")
    assert episodes[1].info["error_site"] == "agent" and episodes[0].trajectories[0].steps


def test_every_rollout_yields_an_episode_whatever_fails():
    def script(prompt, sampling):
        return InfraError("down") if prompt[0]["content"] == "task 1" else "yes"

    tasks = [{"id": i, "k": 1} for i in range(3)]
    episodes = make_engine(FakeModel(script), retry_limit=0).execute_tasks(tasks, n_rollouts=2)
    assert [ep.termination_reason for ep in episodes] == [R.ENV_DONE] * 2 + [R.INFRA_ERROR] * 2 + [R.ENV_DONE] * 2


# ---- length limits and the token path ------------------------------------------------------------------------


def test_max_prompt_length_stops_before_calling_the_model():
    model = FakeModel("yes", tokenizer=FakeTokenizer())
    episode = only(make_engine(model, max_prompt_length=10).execute_tasks([{"k": 1}]))
    assert episode.termination_reason is R.MAX_PROMPT_LENGTH
    assert model.calls == [] and episode.metrics["steps"] == 0


def test_max_response_length_bounds_everything_after_the_first_prompt():
    tok = FakeTokenizer()
    model = FakeModel("yes yes", tokenizer=tok)
    limit = 60
    engine = make_engine(model, max_response_length=limit, max_steps=20, sampling=SamplingParams(max_tokens=50))
    episode = only(engine.execute_tasks([{"k": 20}]))
    assert episode.termination_reason is R.MAX_RESPONSE_LENGTH
    first_prompt = len(model.calls[0].prompt)
    for call in model.calls:  # each call was given exactly what was left of the budget
        remaining = limit - (len(call.prompt) - first_prompt)
        assert call.sampling.max_tokens == min(50, remaining)
    last = episode.trajectories[0].steps[-1].model_output
    assert len(last.prompt_ids) + len(last.completion_ids) - first_prompt <= limit
    assert episode.metrics["response_tokens"] <= limit


def test_a_completion_cut_by_the_budget_is_kept_but_not_stepped():
    log = Counter()
    model = FakeModel("a long reply", tokenizer=FakeTokenizer())
    episode = only(make_engine(model, log, max_response_length=4).execute_tasks([{"k": 3}]))
    assert episode.termination_reason is R.MAX_RESPONSE_LENGTH
    (step,) = episode.trajectories[0].steps
    assert step.model_output.finish_reason == "length" and len(step.model_output.completion_ids) == 4
    assert log["step"] == 0 and log["close"] == 1


def test_token_path_prompts_extend_previous_prompt_and_completion():
    tok = FakeTokenizer()
    model = FakeModel(["no", "no", "yes"], tokenizer=tok)
    episode = only(make_engine(model, max_steps=5).execute_tasks([{"k": 3}]))
    assert episode.termination_reason is R.ENV_DONE and episode.metrics["token_mismatch"] == 0
    outputs = [step.model_output for step in episode.trajectories[0].steps]
    for before, after in itertools.pairwise(outputs):
        context = before.prompt_ids + before.completion_ids
        assert after.prompt_ids[: len(context)] == context and len(after.prompt_ids) > len(context)
    assert all(out.logprobs == [-0.5] * len(out.completion_ids) for out in outputs)
    assert episode.metrics["prompt_tokens"] == len(outputs[0].prompt_ids)
    assert episode.metrics["completion_tokens"] == sum(len(out.completion_ids) for out in outputs)


def test_agent_that_rewrites_history_counts_token_mismatches():
    class RewritingAgent(BaseAgent):
        def update_from_env(self, observation, reward, done, info):
            super().update_from_env(observation, reward, done, info)
            turn = len(self.messages)
            self.messages = [{"role": "system", "content": f"turn {turn}"}] + [
                m for m in self.messages if m["role"] != "system"
            ]

    engine = make_engine(FakeModel("no", tokenizer=FakeTokenizer()), max_steps=3)
    engine.agent_class = RewritingAgent
    episode = only(engine.execute_tasks([{"k": 3}]))
    assert episode.termination_reason is R.ENV_DONE and episode.metrics["token_mismatch"] >= 1


def test_a_prompt_that_does_not_extend_starts_a_new_row_bounded_by_max_prompt_length():
    class ForgetfulAgent(BaseAgent):
        """Re-renders a longer history from scratch every turn: each prompt starts a new training row."""

        def update_from_env(self, observation, reward, done, info):
            super().update_from_env(observation, reward, done, info)
            self.messages.insert(0, {"role": "system", "content": "x" * 30})

    model = FakeModel("no", tokenizer=FakeTokenizer())
    engine = make_engine(model, max_prompt_length=100, max_response_length=1000, max_steps=10)
    engine.agent_class = ForgetfulAgent
    episode = only(engine.execute_tasks([{"k": 10}]))
    assert episode.termination_reason is R.MAX_PROMPT_LENGTH
    assert episode.metrics["token_mismatch"] >= 1 and 1 <= episode.metrics["steps"] < 10
    assert all(len(call.prompt) <= 100 for call in model.calls)


# ---- concurrency -----------------------------------------------------------------------------------------------


def test_concurrent_rollouts_overlap():
    model = FakeModel("no", delay=0.05)
    engine = make_engine(model, n_parallel=64, max_steps=3)
    start = time.perf_counter()
    episodes = engine.execute_tasks([{"k": 3}] * 64)
    elapsed = time.perf_counter() - start
    assert len(episodes) == 64 and all(ep.termination_reason is R.ENV_DONE for ep in episodes)
    assert elapsed < 64 * 3 * 0.05 / 8  # serial would take 9.6 s; a loose bound for a busy machine


def test_n_parallel_bounds_concurrency():
    active = Counter()

    class TrackingModel(FakeModel):
        async def generate(self, prompt, sampling=None):
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
            try:
                return await super().generate(prompt, sampling)
            finally:
                active["now"] -= 1

    engine = make_engine(TrackingModel("no", delay=0.01), n_parallel=3, max_steps=2)
    assert len(engine.execute_tasks([{"k": 2}] * 10)) == 10
    assert active["max"] == 3


class UnsafeEnv(CounterEnv):
    """Records whether two calls into any instance ever overlapped."""

    guard = threading.Lock()
    active = 0
    overlaps = 0

    @staticmethod
    def is_multithread_safe() -> bool:
        return False

    def _enter(self) -> None:
        with UnsafeEnv.guard:
            UnsafeEnv.active += 1
            UnsafeEnv.overlaps += UnsafeEnv.active > 1
        time.sleep(0.002)
        with UnsafeEnv.guard:
            UnsafeEnv.active -= 1

    def reset(self):
        self._enter()
        return super().reset()

    def step(self, action):
        self._enter()
        return super().step(action)


def test_non_thread_safe_env_never_runs_concurrently():
    engine = make_engine(FakeModel("no", delay=0.001), n_parallel=16, max_steps=3, env_workers=8)
    engine.env_class = UnsafeEnv
    episodes = engine.execute_tasks([{"k": 3}] * 16)
    assert all(ep.termination_reason is R.ENV_DONE for ep in episodes)
    assert UnsafeEnv.overlaps == 0


def test_inline_env_workers_zero():
    log = Counter()
    episodes = make_engine(FakeModel("yes"), log, env_workers=0).execute_tasks([{"k": 2}] * 4)
    assert all(ep.termination_reason is R.ENV_DONE for ep in episodes) and log["close"] == 4


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError, match="n_parallel"):
        make_engine(FakeModel("x"), n_parallel=0)
    with pytest.raises(TypeError, match="tasks must be dicts"):
        make_engine(FakeModel("x")).execute_tasks(["not a dict"])


def test_seeded_sampling_gives_each_call_its_own_reproducible_seed():
    def seeds_of_a_run(delays):
        model = FakeModel("ok", delay=lambda prompt, sampling: delays.pop() if delays else 0.0)
        engine = make_engine(model, sampling=SamplingParams(seed=5), max_steps=2)
        engine.execute_tasks([{"id": "a", "k": 2}, {"id": "b", "k": 2}], n_rollouts=2)
        return sorted(call.sampling.seed for call in model.calls)

    first = seeds_of_a_run([0.03, 0.0, 0.02, 0.01])
    again = seeds_of_a_run([0.0, 0.03, 0.01, 0.02])  # calls reach the model in another order
    assert first == again
    assert len(set(first)) == 8  # 2 tasks x 2 rollouts x 2 turns: no two calls share a seed


def test_unseeded_sampling_is_passed_through():
    model = FakeModel("ok")
    make_engine(model, max_steps=1).execute_tasks([{"id": "a", "k": 1}])
    assert model.calls[0].sampling.seed is None


def test_env_class_decides_inline_or_thread_pool():
    seen = []

    class ThreadRecordingEnv(CounterEnv):
        def step(self, action):
            seen.append(threading.current_thread() is threading.main_thread())
            return super().step(action)

    class FastEnv(ThreadRecordingEnv):
        blocking = False

    for env_class in (ThreadRecordingEnv, FastEnv):
        engine = AgentExecutionEngine(
            agent_class=BaseAgent, env_class=env_class, model=FakeModel("yes"), env_args={"log": Counter()}, max_steps=1
        )
        engine.execute_tasks([{"id": "a", "k": 1}])
    assert seen == [False, True]  # blocking (default): a worker thread; blocking=False: inline on the loop

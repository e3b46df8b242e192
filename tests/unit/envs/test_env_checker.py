"""`check_env`: one broken env per kind of mistake, each named in plain words in the error."""

from __future__ import annotations

import typing
import warnings

import numpy as np
import pytest

import rllm.envs
from rllm.envs.base import BaseEnv
from rllm.envs.checker import EnvCheckError, EnvCheckWarning, check_env
from rllm.errors import RllmError
from rllm.tasks.frozenlake import FrozenLakeEnv

ACTIONS = ["a", "b"]


class CountEnv(BaseEnv):
    """A correct env: three steps, reward 1.0 at the end. Broken variants below override one thing each."""

    def __init__(self, length: int = 3) -> None:
        self.length, self.count, self.done = length, 0, False

    @classmethod
    def from_dict(cls, task: dict) -> CountEnv:
        return cls(task.get("length", 3))

    def reset(self):
        self.count, self.done = 0, False
        return "count 0", {"length": self.length}

    def step(self, action):
        if self.done:
            raise RuntimeError("episode is over")
        self.count += 1
        self.done = self.count >= self.length
        return f"count {self.count}", float(self.done), self.done, {"count": self.count}


def problems_of(env, **kwargs) -> str:
    kwargs.setdefault("actions", ACTIONS)
    with pytest.raises(EnvCheckError) as caught:
        check_env(env, {}, **kwargs)
    return str(caught.value)


def test_a_correct_env_passes_and_gets_a_report():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = check_env(CountEnv, {"length": 2}, actions=ACTIONS, n_episodes=2)
    assert (report.episodes, report.steps, report.episodes_done, report.mean_return) == (2, 4, 2, 1.0)
    assert report.determinism_checked and report.multithread_safe is True and report.action_source == "actions"
    assert report.to_dict()["env_name"] == "CountEnv"


def test_frozenlake_passes_cleanly_with_its_own_sample_action():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = check_env(FrozenLakeEnv, {"size": 3, "seed": 2})
    assert report.action_source == "sample_action" and report.problems == []


def test_error_type_and_lazy_export():
    assert issubclass(EnvCheckError, RllmError)
    assert rllm.envs.check_env is check_env


# ---------------------------------------------------------------- from_dict


class NoFromDict:
    reset, step, close = CountEnv.reset, CountEnv.step, BaseEnv.close
    is_multithread_safe = staticmethod(lambda: True)


class PlainMethodFromDict(CountEnv):
    def from_dict(self, task):  # forgot @classmethod
        return CountEnv()


class FromDictReturnsNone(CountEnv):
    @classmethod
    def from_dict(cls, task):
        cls(task.get("length", 3))  # forgot return


class FromDictNeedsKey(CountEnv):
    @classmethod
    def from_dict(cls, task):
        return cls(task["length"])


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (NoFromDict, "has no from_dict()"),
        (PlainMethodFromDict, "from_dict is a plain method"),
        (FromDictReturnsNone, "returned NoneType"),
        (FromDictNeedsKey, "KeyError: 'length'"),
    ],
)
def test_from_dict_mistakes(env, words):
    assert words in problems_of(env)


def test_from_dict_failure_without_task_suggests_passing_one():
    with pytest.raises(EnvCheckError, match=r"no task was given"):
        check_env(FromDictNeedsKey, actions=ACTIONS)


def test_abstract_env_names_the_missing_methods():
    class OnlyReset(BaseEnv):
        def reset(self):
            return "", {}

    message = problems_of(OnlyReset)
    assert "does not implement from_dict, step" in message


# ---------------------------------------------------------------- reset and step shapes


class ResetReturnsBareObservation(CountEnv):
    def reset(self):
        super().reset()
        return "count 0"


class ResetInfoNotDict(CountEnv):
    def reset(self):
        return super().reset()[0], ["not", "a", "dict"]


class GymnasiumStyleStep(CountEnv):
    def step(self, action):
        observation, reward, done, info = super().step(action)
        return observation, reward, done, False, info


class StepReturnsObservationOnly(CountEnv):
    def step(self, action):
        return super().step(action)[0]


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (ResetReturnsBareObservation, "reset() returned str ('count 0'), not a pair (observation, info)"),
        (ResetInfoNotDict, "reset() returned info of type list; info must be a dict"),
        (GymnasiumStyleStep, "not a 4-tuple (observation, reward, done, info). It looks like gymnasium's"),
        (StepReturnsObservationOnly, "step() returned str ('count 1'), not a 4-tuple"),
    ],
)
def test_shape_mistakes(env, words):
    assert words in problems_of(env)


# ---------------------------------------------------------------- rewards and done


def reward_env(value):
    class RewardEnv(CountEnv):
        def step(self, action):
            observation, _, done, info = super().step(action)
            return observation, value, done, info

    return RewardEnv


@pytest.mark.parametrize(
    ("reward", "words"),
    [
        (float("nan"), "reward is nan; return a finite float"),
        (float("inf"), "reward is inf"),
        (None, "reward is None"),
        ("1.0", "reward is a str ('1.0'), not a number"),
        (True, "reward is a bool (True); return a float"),
    ],
)
def test_reward_mistakes(reward, words):
    assert words in problems_of(reward_env(reward))


def test_numpy_float_rewards_are_fine():
    check_env(reward_env(np.float32(0.5)), {}, actions=ACTIONS)


def done_env(convert):
    class DoneEnv(CountEnv):
        def step(self, action):
            observation, reward, done, info = super().step(action)
            return observation, reward, convert(done), info

    return DoneEnv


@pytest.mark.parametrize(
    ("convert", "words"),
    [
        (int, "done is 0 of type int, not a bool; return True or False"),
        (np.bool_, "not a bool; wrap it in bool(...)"),
        (lambda done: "yes" if done else "", "done is '' of type str"),
    ],
)
def test_done_mistakes(convert, words):
    assert words in problems_of(done_env(convert))


# ---------------------------------------------------------------- JSON


class NumpyObservation(CountEnv):
    def step(self, action):
        _, reward, done, info = super().step(action)
        return np.array([self.count]), reward, done, info


class SetInInfo(CountEnv):
    def reset(self):
        return "count 0", {"seen": {1, 2}, 3: "int key"}


def test_non_json_observation_names_the_type_and_fix():
    message = problems_of(NumpyObservation)
    assert "step(): observation is a numpy.ndarray" in message and ".tolist()" in message


def test_non_json_info_names_the_key():
    message = problems_of(SetInInfo)
    assert "reset(): info['seen'] is a set" in message and "sorted list" in message
    assert "info has the key 3 of type int; JSON keys must be str" in message


# ---------------------------------------------------------------- behaviour


class AcceptsStepAfterDone(CountEnv):
    def step(self, action):
        self.done = False
        return super().step(action)


class RandomReset(CountEnv):
    calls = 0

    def reset(self):
        RandomReset.calls += 1
        return f"start {RandomReset.calls}", {}


class CrashingStep(CountEnv):
    def step(self, action):
        raise ValueError("boom")


class CrashingClose(CountEnv):
    def close(self):
        raise OSError("disk gone")


class BadThreadFlag(CountEnv):
    @staticmethod
    def is_multithread_safe():
        return "yes"


class ThreadFlagNeedsSelf(CountEnv):
    def is_multithread_safe(self):
        return True


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (AcceptsStepAfterDone, "step() after done=True was silently accepted"),
        (RandomReset, "different first observations for two fresh envs built from the same task"),
        (CrashingStep, "ValueError: boom (at test_env_checker.py:"),
        (CrashingClose, "close() raised OSError: disk gone"),
        (BadThreadFlag, "is_multithread_safe() returned 'yes' (str); return True or False"),
        (ThreadFlagNeedsSelf, "is_multithread_safe() raised TypeError"),
    ],
)
def test_behaviour_mistakes(env, words):
    assert words in problems_of(env)


def test_crash_traceback_points_at_the_users_line():
    message = problems_of(CrashingStep)
    assert "in step)" in message and ("step('a')" in message or "step('b')" in message)


def test_never_terminating_is_a_warning_not_an_error():
    with pytest.warns(EnvCheckWarning, match="did not end within 5 random steps"):
        report = check_env(CountEnv, {"length": 100}, actions=ACTIONS, max_steps=5)
    assert report.episodes_done == 0 and report.problems == []


def test_placeholder_actions_warn():
    with pytest.warns(EnvCheckWarning, match="placeholder strings"):
        report = check_env(CountEnv, {})
    assert report.action_source == "placeholder"


def test_all_problems_are_collected_in_a_numbered_list():
    class ManyMistakes(CountEnv):
        def step(self, action):
            observation, _, done, _info = super().step(action)
            self.done = False
            return observation, None, int(done), {"array": np.zeros(2)}

    message = problems_of(ManyMistakes)
    assert message.startswith("ManyMistakes has 4 problems")
    for number, words in enumerate(
        ["reward is None", "done is 0 of type int", "info['array']", "silently accepted"], 1
    ):
        assert f"  {number}. " in message and words in message


def test_warn_only_returns_the_problems_instead_of_raising():
    with pytest.warns(EnvCheckWarning, match="silently accepted"):
        report = check_env(AcceptsStepAfterDone, {}, actions=ACTIONS, warn_only=True)
    assert len(report.problems) == 1


def test_an_instance_without_a_task_is_reused():
    report = check_env(CountEnv(2), actions=ACTIONS, n_episodes=2)
    assert report.episodes == 2 and report.determinism_checked


def test_sample_action_that_takes_an_rng_gets_the_checks_rng():
    class Sampling(CountEnv):
        drawn: typing.ClassVar[list] = []

        def sample_action(self, rng):
            Sampling.drawn.append(rng.random())
            return "a"

    check_env(Sampling, {}, n_episodes=2)
    assert len(set(Sampling.drawn)) == len(Sampling.drawn) == 6  # one RNG across episodes: no repeats


def test_without_from_dict_the_rest_is_still_checked_on_a_plain_instance():
    class NoFromDictBadReward(NoFromDict):
        def __init__(self):
            CountEnv.__init__(self)

        def step(self, action):
            return "x", "high", True, {}

    message = problems_of(NoFromDictBadReward)
    assert "1. NoFromDictBadReward has no from_dict()" in message and "2. step(): reward is a str" in message


def test_from_dict_that_consumes_the_task_is_caught():
    class PopsTask(CountEnv):
        @classmethod
        def from_dict(cls, task):
            return cls(task.pop("length"))

    with pytest.raises(EnvCheckError, match="must not consume or mutate the task"):
        check_env(PopsTask, {"length": 2}, actions=ACTIONS)


def test_reset_crash_is_reported():
    class CrashingReset(CountEnv):
        def reset(self):
            return {}["missing"]

    assert "reset() raised KeyError: 'missing' (at test_env_checker.py:" in problems_of(CrashingReset)

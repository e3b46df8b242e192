"""rLLM v0.2's details of the core types, which are rllm's own (`rllm.agents.agent` re-exports `rllm.types`): a
Step built with token ids, Trajectory.uid, Trajectory.is_cumulative(), and a Trajectory's reward reading 0.0 until
it is given while rllm still knows it was not."""

from __future__ import annotations

import json

from rllm.agents.agent import Step as RllmStep
from rllm.agents.agent import Trajectory as RllmTrajectory
from rllm.types import Episode, ModelOutput, Step, Trajectory


def test_rllms_agent_types_are_rllms_own():
    assert RllmStep is Step and RllmTrajectory is Trajectory


def test_a_step_built_with_token_ids_keeps_them_in_its_model_output():
    step = Step(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5], reward=1.0)
    assert (step.prompt_ids, step.response_ids, step.logprobs) == ([1, 2], [3], [-0.5])
    assert step.model_output.completion_ids == [3] and step.model_output.has_token_ids
    step.response_ids = [4, 5]  # rLLM's agents assign them too
    assert step.model_output.completion_ids == [4, 5] and step.model_output.prompt_ids == [1, 2]
    merged = Step(prompt_ids=[9], model_output=ModelOutput(text="hi", completion_ids=[7]))
    assert merged.model_output.text == "hi" and (merged.prompt_ids, merged.response_ids) == ([9], [7])
    assert Step.model_validate_json(step.model_dump_json()) == step
    assert Step().prompt_ids == [] and Step().model_output is None


def test_reward_reads_zero_until_given_and_the_step_sum_stands_in_for_it():
    trajectory = Trajectory(steps=[Step(reward=0.25), Step(reward=0.5)])
    assert trajectory.reward == 0.0 and not trajectory.has_reward() and trajectory.final_reward() == 0.75
    assert json.loads(trajectory.model_dump_json())["reward"] is None  # unset survives a round trip
    assert not Trajectory.model_validate_json(trajectory.model_dump_json()).has_reward()
    trajectory.reward += 2.0  # rLLM code adds to it
    assert trajectory.has_reward() and trajectory.final_reward() == 2.0
    assert Trajectory.model_validate_json(trajectory.model_dump_json()).final_reward() == 2.0
    assert Trajectory(reward=None).reward == 0.0 and Trajectory(reward=0.0).has_reward()


def test_uid_is_unique_given_or_made_and_stays_out_of_the_episodes_on_disk():
    first, second = Trajectory(), Trajectory()
    assert first.uid != second.uid and first.uid == first.uid
    assert Trajectory(uid="abc").uid == "abc" and Trajectory.from_dict({"uid": "x", "name": "a"}).uid == "x"
    episode = Episode(trajectories=[Trajectory(uid="abc")])
    assert "abc" not in episode.to_json() and Episode.from_json(episode.to_json()) == Episode(
        trajectories=[Trajectory()]
    )


def test_is_cumulative_says_whether_each_step_extends_the_last():
    hello = [{"role": "user", "content": "hi"}]
    grown = [*hello, {"role": "assistant", "content": "yo"}]
    assert Trajectory(steps=[Step(chat_completions=hello), Step(chat_completions=grown)]).is_cumulative()
    assert not Trajectory(steps=[Step(chat_completions=grown), Step(chat_completions=hello)]).is_cumulative()
    assert Trajectory().is_cumulative()

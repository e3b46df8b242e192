import json

import pytest
from pydantic import ValidationError

from rllm.types import Episode, ModelOutput, Step, TerminationReason, ToolCall, Trajectory


def _episode() -> Episode:
    output = ModelOutput(
        text='<tool_call>{"name": "calc", "arguments": {"x": 1.5}}</tool_call>',
        content="",
        reasoning="think first",
        tool_calls=[
            ToolCall(id="c1", name="calc", arguments={"x": 1.5, "nested": {"ys": [1, 2]}}),
            ToolCall(name="broken", arguments='{"x": '),
        ],
        prompt_ids=[1, 2, 3, 151644],
        completion_ids=[9, 8, 2],
        logprobs=[-0.125, -2.5e-07, -13.75],
        finish_reason="stop",
        weight_version=3,
    )
    step = Step(
        chat_completions=[{"role": "user", "content": "hi", "meta": {"k": [1, None, True]}}],
        model_output=output,
        action={"move": "up", "args": [1, 2]},
        observation="P_G\n___",
        reward=0.5,
        done=True,
        info={"deep": {"er": {"list": [1.0, "two", None]}}, "unicode": "é→✓"},
    )
    return Episode(
        id="task-7:3",
        task={"id": "task-7", "size": 4, "grid": [[0, 1], [1, 0]]},
        trajectories=[Trajectory(name="solver", steps=[step, Step()], reward=1.0, info={"x": 1})],
        termination_reason=TerminationReason.ENV_DONE,
        is_correct=True,
        metrics={"steps": 2, "time_model": 0.25},
    )


def test_episode_json_round_trip_is_lossless():
    episode = _episode()
    text = episode.to_json()
    again = Episode.from_json(text)
    assert again == episode
    assert again.to_json() == text
    out = again.trajectories[0].steps[0].model_output
    assert out.logprobs == [-0.125, -2.5e-07, -13.75]
    assert out.tool_calls[1].arguments == '{"x": '
    assert again.termination_reason is TerminationReason.ENV_DONE
    # plain json too: what a user reading the JSONL with another tool sees
    assert json.loads(text)["trajectories"][0]["steps"][0]["model_output"]["completion_ids"] == [9, 8, 2]


def test_episode_id_parts():
    episode = _episode()
    assert episode.task_id == "task-7"
    assert episode.rollout_idx == 3
    assert Episode(id="a:b:12").task_id == "a:b"


def test_unknown_fields_are_rejected():
    with pytest.raises(ValidationError, match="rewrd"):
        Step(rewrd=1.0)


def test_model_output_lengths_and_missing_ids():
    assert ModelOutput(text="x").has_token_ids is False
    out = ModelOutput(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-1.0])
    assert (out.has_token_ids, out.prompt_length, out.completion_length) == (True, 2, 1)


def test_trajectory_total_step_reward():
    traj = Trajectory(steps=[Step(reward=0.25), Step(reward=1.0)])
    assert traj.total_step_reward() == 1.25

"""rLLM v0.2's Workflow API (rllm.workflows.workflow) on rllm's engines: its constructor, reset, commit, agent
collection, hooks in rLLM's style, TerminationEvent with rLLM's reasons, run_in_executor, and rLLM's
AgentWorkflowEngine constructor (task_ids, retry_limit, raise_on_error)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from rllm.agents.agent import Action, BaseAgent, Episode, Step, Trajectory
from rllm.engine.agent_workflow_engine import AgentWorkflowEngine, RolloutFailedError
from rllm.engine.rollout import ClientRolloutEngine
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.types import TerminationReason as Ours
from rllm.workflows.workflow import TerminationEvent, TerminationReason, Workflow


class EchoAgent(BaseAgent):
    def __init__(self):
        self.reset()

    def reset(self):
        self._trajectory = Trajectory()
        self.messages = []

    def update_from_env(self, observation, reward, done, info, **kwargs):
        if self._trajectory.steps:
            self.get_current_state().reward = reward
        if observation:
            self.messages.append({"role": "user", "content": str(observation)})

    def update_from_model(self, response, **kwargs):
        self.messages.append({"role": "assistant", "content": response})
        self._trajectory.steps.append(Step(chat_completions=copy.deepcopy(self.messages), model_response=response))
        return Action(response)

    @property
    def chat_completions(self):
        return self.messages

    @property
    def trajectory(self):
        return self._trajectory


class TwoTurns(Workflow):
    """Two turns of one conversation (application_id=uid), its agent held as an attribute and never committed."""

    def __init__(self, rollout_engine, stop_with=None, **kwargs):
        super().__init__(rollout_engine, **kwargs)
        self.agent = EchoAgent()
        self.stop_with = stop_with

    async def run(self, task, uid, **kwargs):
        self.reset(task, uid)
        self.agent.update_from_env(task["question"], 0.0, False, {})
        for turn in range(2):
            output = await self.rollout_engine.get_model_response(self.agent.chat_completions, application_id=uid)
            self.agent.update_from_model(output.text)
            length = await self.run_in_executor(len, output.text)
            self.agent.update_from_env(f"turn {turn}", float(length % 2), turn == 1, {})
        if self.stop_with is not None:
            raise TerminationEvent(self.stop_with)

    def assign_episode_correctness(self, episode):  # rLLM's style: set the field, return None
        episode.is_correct = len(episode.trajectories) == 1


def engine(workflow_cls=TwoTurns, script=("ab", "abc"), **kwargs):
    model = FakeModel(list(script) * 8, tokenizer=FakeTokenizer())
    rollout_engine = ClientRolloutEngine(model, max_prompt_length=512, max_response_length=256)
    return AgentWorkflowEngine(
        workflow_cls=workflow_cls,
        workflow_args=kwargs.pop("workflow_args", {}),
        rollout_engine=rollout_engine,
        **kwargs,
    ), model


def test_an_rllm_workflow_runs_with_its_agent_collected_and_turns_merged():
    eng, model = engine(workflow_args={"gamma": 0.5})
    (episode,) = asyncio.run(eng.execute_tasks([{"question": "hi"}], task_ids=["t"]))
    assert episode.id == "t:0" and episode.termination_reason == TerminationReason.ENV_DONE == Ours.ENV_DONE
    (trajectory,) = episode.trajectories  # collected from self.agent, never committed
    assert [s.model_response for s in trajectory.steps] == ["ab", "abc"]
    assert trajectory.reward == 1.0  # raw rewards 0 ("ab") + 1 ("abc"); the steps are then discounted (gamma=0.5)
    assert [s.reward for s in trajectory.steps] == [0.5, 1.0]
    assert episode.is_correct is True  # the rLLM-style hook's field
    assert episode.metrics["token_mismatch"] == 0 and episode.metrics["agent_acc"] == 1.0
    second_prompt = model.calls[1].prompt  # one conversation: the second prompt extends the first + its reply
    context = trajectory.steps[0].prompt_ids + trajectory.steps[0].response_ids
    assert second_prompt[: len(context)] == context


def test_task_ids_number_repeats_and_rllm_reasons_map_to_ours():
    eng, _ = engine(workflow_args={"stop_with": TerminationReason.MAX_TURNS_EXCEEDED})
    episodes = asyncio.run(eng.execute_tasks([{"question": "a"}] * 2 + [{"question": "b"}], task_ids=["a", "a", "b"]))
    assert [e.id for e in episodes] == ["a:0", "a:1", "b:0"]
    assert all(e.termination_reason is Ours.MAX_TURNS for e in episodes)
    assert TerminationReason.MAX_TURNS_EXCEEDED == Ours.MAX_TURNS
    unknown = engine(workflow_args={"stop_with": TerminationReason.UNKNOWN})[0]
    (default,) = asyncio.run(unknown.execute_tasks([{"question": "q"}]))
    assert default.termination_reason is Ours.ENV_DONE  # rLLM's UNKNOWN: the end of a normal run


def test_a_failing_workflow_raises_by_default_naming_the_episode_and_not_when_asked():
    class Broken(Workflow):
        async def run(self, task, uid, **kwargs):
            raise ValueError("my bug")

    eng, _ = engine(Broken, retry_limit=1)
    with pytest.raises(RolloutFailedError, match=r"\[x:0\].*ValueError: my bug"):
        asyncio.run(eng.execute_tasks([{}], task_ids=["x"]))
    eng, _ = engine(Broken, raise_on_error=False)
    (episode,) = asyncio.run(eng.execute_tasks([{}]))
    assert episode.termination_reason is Ours.ERROR and "my bug" in episode.info["error"]
    assert episode.info["error_attempts"] == 3  # rLLM's default retry_limit: three attempts in all


def test_an_error_episode_is_run_again_as_rllm_does():
    class FailsOnce(Workflow):
        attempts = 0

        async def run(self, task, uid, **kwargs):
            type(self).attempts += 1
            if type(self).attempts == 1:
                raise RuntimeError("flaky")
            output = await self.rollout_engine.get_model_response([{"role": "user", "content": "q"}])
            self.commit(trajectory=Trajectory(steps=[Step(model_output=output, reward=1.0)]))

    (episode,) = asyncio.run(engine(FailsOnce, retry_limit=2)[0].execute_tasks([{}]))
    assert episode.termination_reason is Ours.ENV_DONE and episode.info["error_attempts"] == 2


def test_a_returned_episode_keeps_its_correctness_and_commit_takes_rllm_arguments():
    class Returns(Workflow):
        async def run(self, task, uid, **kwargs):
            self.reset(task, uid)
            output = await self.rollout_engine.get_model_response([{"role": "user", "content": "q"}])
            kept = Trajectory(name="kept", steps=[Step(model_output=output, reward=0.0)])
            self.commit("snapshot", trajectory=kept)
            kept.steps[0].reward = 5.0  # after the commit: the snapshot does not see it
            self.commit(name="empty", trajectory=Trajectory())  # empty: not committed, as in rLLM
            return Episode(id=uid, task=task, trajectories=[], is_correct=True, metrics={"mine": 1})

    (episode,) = asyncio.run(engine(Returns)[0].execute_tasks([{}]))
    assert [t.name for t in episode.trajectories] == ["snapshot"] and episode.trajectories[0].reward == 0.0
    assert episode.is_correct is True and episode.metrics["mine"] == 1


def test_rllm_engine_arguments_that_do_not_exist_here_are_errors():
    model = FakeModel("x", tokenizer=FakeTokenizer())
    with pytest.raises(TypeError, match="OpenAIEngine"):
        AgentWorkflowEngine(workflow_cls=TwoTurns, workflow_args={}, rollout_engine=model)
    with pytest.raises(ValueError, match="AgentTrainer"):
        AgentWorkflowEngine(workflow_cls=TwoTurns, rollout_engine=ClientRolloutEngine(model), config={"a": 1})
    with pytest.raises(TypeError, match="bogus"):
        AgentWorkflowEngine(workflow_cls=TwoTurns, rollout_engine=ClientRolloutEngine(model), bogus=1)
    with pytest.raises(TypeError, match="frequency_penalty"):
        asyncio.run(ClientRolloutEngine(model).get_model_response([], frequency_penalty=1.0))

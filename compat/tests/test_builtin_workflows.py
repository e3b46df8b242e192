"""rLLM v0.2's built-in workflows (rllm.workflows.{multi_turn,single_turn,cumulative,simple}_workflow) through rLLM's
AgentWorkflowEngine and OpenAIEngine, against a local server that speaks token ids: rLLM's agents see only the
reply's text, and their steps still carry the exact sampled ids."""

from __future__ import annotations

import asyncio

import pytest
from test_frozenlake_example import frozenlake_server  # noqa: F401  (a fixture)

from rllm.engine import OpenAIEngine
from rllm.engine.agent_workflow_engine import AgentWorkflowEngine
from rllm.engine.rollout import ClientRolloutEngine
from rllm.environments.frozenlake.frozenlake import FrozenLakeEnv
from rllm.models.fake import FakeModel, FakeTokenizer
from rllm.rewards.base import RewardOutput
from rllm.types import TerminationReason
from rllm.workflows.cumulative_workflow import CumulativeWorkflow
from rllm.workflows.multi_turn_workflow import MultiTurnWorkflow
from rllm.workflows.simple_workflow import SimpleWorkflow

TASKS = [{"seed": seed, "size": 4, "p": 0.8} for seed in range(4)]


def run_workflow(workflow_cls, server, tokenizer, **workflow_args):
    rollout_engine = OpenAIEngine(
        model=tokenizer.name_or_path,
        tokenizer=tokenizer,
        max_prompt_length=4096,
        max_response_length=2048,
        base_url=server.base_url,
        api_key="None",
        sampling_params={"temperature": 0.6, "top_p": 0.95},
    )
    engine = AgentWorkflowEngine(
        workflow_cls=workflow_cls,
        workflow_args=workflow_args,
        rollout_engine=rollout_engine,
        config=None,
        n_parallel_tasks=4,
        retry_limit=1,
    )
    return asyncio.run(engine.execute_tasks(TASKS))


@pytest.mark.parametrize("workflow_cls", [MultiTurnWorkflow, CumulativeWorkflow])
def test_multi_turn_frozenlake_steps_carry_the_sampled_ids(workflow_cls, frozenlake_server, qwen_tokenizer):  # noqa: F811
    episodes = run_workflow(
        workflow_cls,
        frozenlake_server,
        qwen_tokenizer,
        agent_cls="frozenlakeagent",
        env_cls=FrozenLakeEnv,
        agent_args={"max_steps": 6},
        env_args={"max_steps": 8, "is_slippery": False},
        max_steps=6,
    )
    assert {e.termination_reason for e in episodes} <= {TerminationReason.ENV_DONE, TerminationReason.MAX_TURNS}
    assert any(e.is_correct for e in episodes)
    for episode in episodes:
        (trajectory,) = episode.trajectories  # the agent attribute, collected
        assert trajectory.steps and episode.metrics["token_mismatch"] == 0
        for index, step in enumerate(trajectory.steps):
            prompt, completion = step.model_output.prompt_ids, step.model_output.completion_ids
            assert frozenlake_server.sampled[tuple(prompt)] == completion  # what the server sampled, exactly
            assert step.model_output.text == step.model_response
            if index:  # one conversation: every turn extends the last
                previous = trajectory.steps[index - 1].model_output
                context = previous.prompt_ids + previous.completion_ids
                assert prompt[: len(context)] == context
        assert trajectory.reward == sum(step.reward for step in trajectory.steps)


def test_an_agent_class_name_rllm_does_not_have_is_an_error_listing_ours(frozenlake_server, qwen_tokenizer):  # noqa: F811
    with pytest.raises(ValueError, match=r"agent_cls='webarenaagent': no rLLM class.*frozenlakeagent, math_agent"):
        MultiTurnWorkflow(agent_cls="webarenaagent", env_cls=FrozenLakeEnv)


def test_simple_workflow_scores_the_reply_and_resets_its_agent():
    seen = []

    def reward_function(task, action):
        seen.append(action.action)
        return RewardOutput(reward=float(action.action == "4"), is_correct=action.action == "4")

    model = FakeModel(["4", "5"], tokenizer=FakeTokenizer())
    engine = AgentWorkflowEngine(
        workflow_cls=SimpleWorkflow,
        workflow_args={"reward_function": reward_function},
        rollout_engine=ClientRolloutEngine(model),
        n_parallel_tasks=1,
    )
    episodes = asyncio.run(engine.execute_tasks([{"question": "2 + 2?"}, {"prompt": "3 + 2?"}]))
    assert seen == ["4", "5"] and [e.is_correct for e in episodes] == [True, False]
    for episode in episodes:
        (trajectory,) = episode.trajectories
        (step,) = trajectory.steps
        assert step.model_output.completion_ids and step.chat_completions[-1]["role"] == "assistant"

"""Harnesses by name (`agent: NAME`): each plays the arithmetic task through the gateway with the calculator tool,
a tool call then an answer, and records one token-exact row; turn limits, user harnesses and bad names."""

from __future__ import annotations

import pytest

from rllm.config import load_config
from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.harnesses import HARNESSES, HarnessError, HarnessJob, harness_workflow, workflow_for_config
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeModel
from rllm.tasks import get_task
from rllm.types import TerminationReason

TASK = {"id": "q", "question": "What is 347 * 6?", "answer": 2082}
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 6"}}\n</tool_call>'
PACKAGES = {"react": "openai", "openai-agents": "agents", "anthropic": "anthropic", "langgraph": "langchain"}


def play(name: str, script, tokenizer, *, max_turns: int = 4, max_tokens: int = 256, **agent_args):
    agent_args.setdefault("tools", ["calculator"])
    workflow_class, workflow_args = harness_workflow(
        name, get_task("arithmetic"), agent_args=agent_args, max_turns=max_turns
    )
    model = FakeModel(script, tokenizer=tokenizer)
    engine = AgentWorkflowEngine(
        workflow_class=workflow_class,
        workflow_args=workflow_args,
        model=model,
        sampling=SamplingParams(max_tokens=max_tokens),
    )
    [episode] = engine.execute_tasks([TASK])
    return episode, model


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_each_harness_uses_the_tool_then_answers_in_one_token_exact_row(smollm2_tokenizer, name):
    pytest.importorskip(PACKAGES[name])
    episode, _ = play(name, [f"Let me compute.\n{CALL}", "It is 2082."], smollm2_tokenizer, instructions="Be exact.")
    assert episode.termination_reason is TerminationReason.ENV_DONE, episode.info.get("error")
    [trajectory] = episode.trajectories
    assert trajectory.reward == 1.0 and trajectory.name == name and len(trajectory.steps) == 2
    assert episode.metrics["token_mismatch"] == 0
    seen = trajectory.steps[1].chat_completions
    assert seen[0]["role"] == "system" and seen[0]["content"].startswith("Be exact.")
    assert any(m["role"] == "tool" and m["content"] == "2082" for m in seen)  # the calculator ran, its result came back
    first, second = (step.model_output for step in trajectory.steps)
    assert second.prompt_ids[: first.prompt_length + first.completion_length] == first.prompt_ids + first.completion_ids


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_an_agent_past_its_turn_limit_ends_as_max_turns_with_its_calls_kept(smollm2_tokenizer, name):
    pytest.importorskip(PACKAGES[name])
    episode, model = play(name, lambda prompt, sampling: CALL, smollm2_tokenizer, max_turns=2)
    assert episode.termination_reason is TerminationReason.MAX_TURNS, episode.info.get("error")
    assert len(model.calls) == 2 and len(episode.trajectories[0].steps) == 2


def test_a_reply_cut_at_max_tokens_is_a_truncated_episode_not_an_error(smollm2_tokenizer):
    """The Agents SDK refuses an "incomplete" response (its reply hit max_tokens) by raising: the episode ends as
    max_response_length, as a truncated native rollout does; react scores the truncated text like any answer."""
    pytest.importorskip("agents")
    long = "The product of these two numbers is 2082, as I computed."
    refused, _ = play("openai-agents", [long], smollm2_tokenizer, max_tokens=4)
    assert refused.termination_reason is TerminationReason.MAX_RESPONSE_LENGTH, refused.info.get("error")
    assert "cut at max_tokens" in refused.info["termination_message"] and len(refused.trajectories[0].steps) == 1
    scored, _ = play("react", [long], smollm2_tokenizer, max_tokens=4)
    assert scored.termination_reason is TerminationReason.ENV_DONE and scored.trajectories[0].reward == 0.0


def my_harness(job: HarnessJob) -> str:
    """A user's own harness: no model call but one, by hand."""
    import openai

    with openai.OpenAI(base_url=job.base_url, api_key="none") as client:
        reply = client.chat.completions.create(model=job.model, messages=[{"role": "user", "content": job.instruction}])
    return reply.choices[0].message.content


def test_a_users_own_harness_by_module_path_and_the_config_key(smollm2_tokenizer):
    config = load_config(None, ["data.task=arithmetic", f"agent={__name__}:my_harness"])
    workflow_class, workflow_args = workflow_for_config(config)
    engine = AgentWorkflowEngine(
        workflow_class=workflow_class, workflow_args=workflow_args, model=FakeModel("2082", tokenizer=smollm2_tokenizer)
    )
    [episode] = engine.execute_tasks([TASK])
    assert episode.trajectories[0].reward == 1.0


def test_bad_names_and_tasks_that_do_not_fit_are_one_line_each(monkeypatch):
    arithmetic = get_task("arithmetic")
    with pytest.raises(HarnessError, match="unknown harness 'nope': use one of react, openai-agents"):
        harness_workflow("nope", arithmetic)
    monkeypatch.setitem(HARNESSES, "missing", "rllm_no_such_framework.harness:run")
    with pytest.raises(
        HarnessError, match=r"needs the 'rllm_no_such_framework' package: pip install 'rllm\[harnesses\]'"
    ):
        harness_workflow("missing", arithmetic)
    with pytest.raises(HarnessError, match="frozenlake.* step by step.*: arithmetic, code, countdown, humaneval, math"):
        harness_workflow("react", get_task("frozenlake"))
    with pytest.raises(HarnessError, match="agent_args.tools: 'abacus' is not a built-in tool"):
        harness_workflow("react", arithmetic, agent_args={"tools": ["abacus"]})
    both = load_config(None, ["data.task=arithmetic", "agent=react", "workflow=single_turn"])
    with pytest.raises(HarnessError, match="both agent='react' and workflow='single_turn'"):
        workflow_for_config(both)


def crashing_harness(job: HarnessJob) -> str:
    job.output = {"stdout": "step 1: thinking\n", "stderr": "Traceback: the agent program fell over\n"}
    raise RuntimeError("the agent program exited with status 3")


def hanging_harness(job: HarnessJob) -> str:
    import time

    time.sleep(0.8)
    return "too late"


def test_a_harness_that_crashes_or_hangs_costs_its_episode_and_keeps_what_it_printed(smollm2_tokenizer):
    arithmetic = get_task("arithmetic")
    model = FakeModel("unused", tokenizer=smollm2_tokenizer)
    crashing = harness_workflow(f"{__name__}:crashing_harness", arithmetic)
    hanging = harness_workflow(f"{__name__}:hanging_harness", arithmetic)
    runs = [(crashing, None), (hanging, 0.3), (harness_workflow(f"{__name__}:my_harness", arithmetic), None)]
    crashed, timed_out, fine = (
        AgentWorkflowEngine(
            workflow_class=cls, workflow_args=args, model=model, episode_timeout=timeout, retry_limit=0
        ).execute_tasks([TASK])[0]
        for (cls, args), timeout in runs
    )
    assert crashed.termination_reason is TerminationReason.ERROR and "status 3" in crashed.info["error"]
    assert crashed.info["harness_output"]["stderr"] == "Traceback: the agent program fell over\n"
    assert timed_out.termination_reason is TerminationReason.TIMEOUT
    assert fine.termination_reason is TerminationReason.ENV_DONE  # the engine goes on after the others


def test_a_malformed_tool_call_ends_the_episode_as_a_policy_error(smollm2_tokenizer):
    """The model tries the calculator with broken JSON: the gateway gives the reply back as text (the parse error in
    the step's info), the agent ends on it, and the episode is the model's mistake, not a success or a bug."""
    broken = '<tool_call>\n{"name": "calculator", "arguments": {"expression": 347 * 6}}\n</tool_call>'
    episode, _ = play("react", [broken], smollm2_tokenizer)
    assert episode.termination_reason is TerminationReason.POLICY_ERROR, episode.info.get("error")
    assert "malformed tool call (invalid_json" in episode.info["error"]
    assert episode.trajectories[0].steps[-1].info["tool_call_errors"][0]["kind"] == "invalid_json"

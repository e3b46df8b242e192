"""The workspace harnesses (`bash`, `mini-swe-agent`) on a shipped `swe` task, through the gateway, over a scripted
model with the SmolLM2 tokenizer: the first reply applies the task's gold patch with a shell command, in the
harness's own format, which really runs in rllm's sandbox (as its user, nothing writable outside /testbed); then
the agent ends its own way and the task grades the repository: resolved, token-exact. A wrong fix scores 0."""

from __future__ import annotations

import json

import pytest

from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.harnesses import HarnessError, harness_workflow
from rllm.models.base import SamplingParams
from rllm.models.fake import FakeModel
from rllm.sandbox import Sandbox
from rllm.tasks import get_task
from rllm.types import TerminationReason

SANDBOX_USER = "65534"  # the sandbox's user (nobody), not this process's
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff"  # mini-swe-agent's end: the sentinel, then the patch


@pytest.fixture(scope="module")
def swe_task() -> dict:
    Sandbox.check()
    return get_task("swe").make_tasks(1, split="train", easiest=True)[0]  # a small bug in toolz


def bash_call(command: str) -> str:
    """A reply calling the `bash` tool, as SmolLM2 writes a tool call (both harnesses' tool is `bash`)."""
    return f"<tool_call>\n{json.dumps({'name': 'bash', 'arguments': {'command': command}})}\n</tool_call>"


def fix_with(patch: str) -> str:
    """Who runs the command, a write outside the repository (refused), then the patch applied."""
    return f"id -u; touch /etc/rllm-escape; git apply <<'RLLM_PATCH'\n{patch}RLLM_PATCH\ngit status --short"


def play(name: str, task: dict, script: list[str], tokenizer):
    workflow_class, workflow_args = harness_workflow(name, get_task("swe"), max_turns=4)
    engine = AgentWorkflowEngine(
        workflow_class=workflow_class,
        workflow_args=workflow_args,
        model=FakeModel(script, tokenizer=tokenizer),
        sampling=SamplingParams(max_tokens=1024),
        max_prompt_length=8192,
        retry_limit=0,
    )
    [episode] = engine.execute_tasks([task])
    assert episode.termination_reason is TerminationReason.ENV_DONE, episode.info.get("error")
    return episode


def first_command_output(episode) -> str:
    """What the first command printed, as the model saw it on its second call (in the harness's template)."""
    seen = episode.trajectories[0].steps[1].chat_completions
    return next(m["content"] for m in seen if m["role"] == "tool")


def assert_resolved_in_the_sandbox(episode) -> None:
    [trajectory] = episode.trajectories
    assert trajectory.reward == 1.0 and trajectory.is_correct and episode.is_correct
    assert trajectory.steps[-1].info["grade"] == "resolved"
    assert episode.metrics["token_mismatch"] == 0
    output = first_command_output(episode)
    assert SANDBOX_USER in output.splitlines()
    assert "/etc/rllm-escape': Read-only file system" in output
    assert "M toolz/curried/exceptions.py" in output  # the patch applied


def test_bash_applies_the_gold_patch_in_the_sandbox_and_is_resolved(swe_task, smollm2_tokenizer):
    script = [bash_call(fix_with(swe_task["patch"])), "Fixed merge_with."]
    episode = play("bash", swe_task, script, smollm2_tokenizer)
    assert_resolved_in_the_sandbox(episode)
    assert episode.trajectories[0].info["answer"] == "Fixed merge_with."


def test_mini_swe_agent_applies_the_gold_patch_submits_and_is_resolved(swe_task, smollm2_tokenizer):
    pytest.importorskip("minisweagent")
    script = [bash_call(fix_with(swe_task["patch"])), bash_call(SUBMIT)]
    episode = play("mini-swe-agent", swe_task, script, smollm2_tokenizer)
    assert_resolved_in_the_sandbox(episode)
    assert episode.info["harness_output"] == {"exit_status": "Submitted"}
    submission = episode.trajectories[0].info["answer"]  # mini-swe-agent's submission: what followed the sentinel
    assert "+    return toolz.merge_with(func, d, *dicts, **kwargs)" in submission
    first_prompt = episode.trajectories[0].steps[0].chat_completions
    assert "<pr_description>" in first_prompt[1]["content"]  # its own SWE-bench prompt, around the task's issue


def test_a_wrong_fix_scores_zero(swe_task, smollm2_tokenizer):
    wrong = "sed -i 's/return None/return {}/' toolz/curried/exceptions.py"
    episode = play("bash", swe_task, [bash_call(wrong), "Fixed."], smollm2_tokenizer)
    [trajectory] = episode.trajectories
    assert trajectory.reward == 0.0 and not episode.is_correct
    assert trajectory.steps[-1].info["grade"] == "tests_failed"


def test_a_harness_that_does_not_fit_the_task_shape_is_one_line():
    with pytest.raises(HarnessError, match=r"task 'swe' is played in a workspace.*use a workspace harness: bash"):
        harness_workflow("react", get_task("swe"))
    with pytest.raises(HarnessError, match=r"the 'bash' harness works in a task's workspace.*tasks: swe"):
        harness_workflow("bash", get_task("arithmetic"))

"""SWEAgent + SWEEnv through the engine with a scripted model: the calls parsed from the text reach the sandboxed
workspace, a fix submitted scores 1, running out of turns grades the repository as it is, and the agent's context
management (cut on arrival, elide old outputs) does what it says."""

from __future__ import annotations

import json

import pytest

from rllm.audit import audit_run
from rllm.engine import AgentExecutionEngine
from rllm.models.fake import FakeModel
from rllm.runs import RunLog, write_json
from rllm.sandbox import Sandbox
from rllm.tasks.swe.agent import SWEAgent
from rllm.tasks.swe.env import SWEEnv
from rllm.types import ModelOutput, TerminationReason
from tests.support.swe import make_calc_task


@pytest.fixture(scope="module")
def calc_task(tmp_path_factory) -> dict:
    Sandbox.check()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLLM_HOME", str(tmp_path_factory.mktemp("rllm-home")))
        yield {**make_calc_task(tmp_path_factory.mktemp("calc")), "id": "calc-0"}


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


FIX = call(
    "file_editor",
    command="str_replace",
    path="/testbed/calc/__init__.py",
    old_str="    if x >= high + 1:",
    new_str="    if x > high:",
)


def run(calc_task, script, max_steps=5, **agent_args):
    engine = AgentExecutionEngine(
        agent_class=SWEAgent, env_class=SWEEnv, model=FakeModel(script), agent_args=agent_args, max_steps=max_steps
    )
    (episode,) = engine.execute_tasks([calc_task])
    return episode


def test_a_scripted_fix_through_the_engine_scores_1(calc_task):
    episode = run(calc_task, [call("execute_bash", cmd="grep -n high calc/__init__.py"), FIX, call("finish")])
    steps = episode.trajectories[0].steps
    assert episode.termination_reason is TerminationReason.ENV_DONE and episode.is_correct
    assert "12:    if x >= high + 1:" in steps[1].chat_completions[-1]["content"]
    assert episode.trajectories[0].reward == 1.0 and steps[-1].info["grade"] == "resolved"


def test_running_out_of_turns_grades_the_repository(calc_task):
    fixed = run(calc_task, [FIX, call("execute_bash", cmd="true")], max_steps=2)
    assert fixed.termination_reason is TerminationReason.MAX_TURNS and fixed.trajectories[0].reward == 1.0
    idle = run(calc_task, [call("execute_bash", cmd="true")] * 2, max_steps=2)
    assert idle.termination_reason is TerminationReason.MAX_TURNS and idle.trajectories[0].reward == 0.0


def test_an_agent_that_edits_the_visible_tests_is_graded_so_and_audited_as_a_hack(calc_task, tmp_path):
    """A constructed run for the `protected_tests` alarm (rllm.health): the agent rewrites the visible test file
    instead of fixing the code; the grader refuses the diff, and `rllm audit` of the eval run raises the alarm with
    a link to that episode."""
    test_file = "/testbed/tests/test_visible.py"
    hack = call("file_editor", command="str_replace", path=test_file, old_str="assert add(0, 0) == 0", new_str="pass")
    episode = run(calc_task, [hack, call("finish")])
    assert episode.trajectories[0].steps[-1].info["grade"] == "protected_path" and episode.trajectories[0].reward == 0
    run_dir = tmp_path / "eval-swe"
    run_dir.mkdir()
    write_json(run_dir / "manifest.json", {"kind": "eval"})
    RunLog(run_dir).log_episodes(0, [episode], "eval")
    (alarm,) = audit_run(run_dir).alarms
    assert (alarm.name, alarm.steps, alarm.episodes) == ("protected_tests", [0], [(0, episode.id)])


def test_long_outputs_are_cut_on_arrival_and_old_ones_elided():
    agent = SWEAgent(max_observation_chars=300, context_chars=700)
    agent.reset()
    agent.update_from_env("the issue", 0.0, False, {"tools": []})
    for i in range(4):
        agent.update_from_model(ModelOutput(text=call("execute_bash", cmd=f"cmd {i}")))
        agent.update_from_env([{"role": "tool", "content": f"{i}" * 1000}], 0.0, False, {})
    tools = [m["content"] for m in agent.messages if m["role"] == "tool"]
    assert all("characters cut ...]" in t for t in tools[-2:]) and all(len(t) < 400 for t in tools[-2:])
    assert tools[:2] == ["[earlier tool output elided to save context; run the call again if you need it]"] * 2
    first_step_seen = agent.trajectory.steps[1].chat_completions[-1]["content"]
    assert first_step_seen.startswith("0" * 200)  # what an earlier step was given stays as it was
    with pytest.raises(ValueError, match="too small"):
        SWEAgent(max_observation_chars=10)


def test_a_reply_of_several_bare_calls_is_taken_as_its_first():
    agent = SWEAgent()
    text = '{"name": "search", "arguments": {"search_term": "clamp"}}\n\n{"name": "finish", "arguments": {}}'
    action = agent.parse_action(ModelOutput(text=text))
    assert action["tool_calls"] == [{"id": "call_0", "name": "search", "arguments": {"search_term": "clamp"}}]
    prose = agent.parse_action(ModelOutput(text="I would search for clamp."))
    assert prose["tool_calls"] == [] and prose["content"] == "I would search for clamp."

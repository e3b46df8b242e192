"""rLLM v0.2's task agents and environments at rLLM's import paths, over rllm's own environments: a SWE episode in
the sandbox (the gold fix scores 1, in both scaffolds), a MiniWoB++ episode in headless Chromium, a coding answer
graded by DeepCoder's reward and revised from its feedback, and the AppWorld agent (its env needs the appworld
library, which is not installed here: constructing it says so)."""

from __future__ import annotations

import importlib.util
import re
import signal
import threading

import pytest

from rllm.agents import CompetitionCodingAgent, MiniWobAgent, SWEAgent
from rllm.agents.appworld_react_agents import AppWorldReactAgent
from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.environments import BrowserGymEnv, CompetitionCodingEnv, SWEEnv
from rllm.environments.appworld.appworld_env import AppWorldEnv
from rllm.errors import RllmError
from rllm.models.fake import FakeModel
from rllm.workflows.agent_env import AgentEnvWorkflow
from tests.support.swe import make_calc_task


def engine(agent_class: type, env_class: type, script, max_steps: int) -> AgentWorkflowEngine:
    """rllm's rollout core running rLLM's agent and env classes (rLLM's engine order: env_args win over the row)."""
    args = {"agent_class": agent_class, "env_class": env_class, "max_steps": max_steps, "env_args_win": True}
    model = FakeModel(script)
    return AgentWorkflowEngine(workflow_class=AgentEnvWorkflow, model=model, workflow_args=args, retry_backoff=0.0)


# ---- SWE ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def calc_task(tmp_path_factory) -> dict:
    from rllm.sandbox import Sandbox

    Sandbox.check()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLLM_HOME", str(tmp_path_factory.mktemp("rllm-home")))
        yield make_calc_task(tmp_path_factory.mktemp("calc"))


def xml_call(name: str, **parameters: str) -> str:
    body = "".join(f"<parameter={key}>{value}</parameter>\n" for key, value in parameters.items())
    return f"<function={name}>\n{body}</function>"


def test_swe_agent_fixes_the_bug_in_an_episode_and_scores_1(calc_task):
    path = "/testbed/calc/__init__.py"
    replies = [
        "Let me read clamp.\n" + xml_call("file_editor", command="view", path=path, view_range="[8, 14]"),
        "The upper bound is off.\n"
        + xml_call(
            "file_editor", command="str_replace", path=path, old_str="if x >= high + 1:", new_str="if x > high:"
        ),
        "Done.\n" + xml_call("finish", command="submit"),
    ]
    [episode] = engine(SWEAgent, SWEEnv, replies, max_steps=5).execute_tasks([{**calc_task, "id": "calc"}])
    [trajectory] = episode.trajectories
    assert episode.is_correct and trajectory.reward == 1.0
    assert [step.reward for step in trajectory.steps] == [0.0, 0.0, 1.0]
    first = trajectory.steps[0]
    assert first.chat_completions[0]["role"] == "system" and "<function=" in first.chat_completions[0]["content"]
    assert calc_task["problem_statement"] in first.chat_completions[1]["content"]
    assert first.thought == "Let me read clamp." and first.action.startswith("<function=file_editor>")
    shown = trajectory.steps[1].chat_completions[3]["content"]  # the tool output, as the agent's next user message
    assert shown.startswith("Execution output of [file_editor]:") and "12\t    if x >= high + 1:" in shown
    assert trajectory.steps[-1].info["grade"] == "resolved"


def test_swe_env_sweagent_scaffold_runs_bash_and_grades_on_submit(calc_task):
    env = SWEEnv.from_dict({**calc_task, "scaffold": "sweagent", "step_timeout": 20})
    try:
        issue, _ = env.reset()
        assert issue == calc_task["problem_statement"]
        # sed -i cannot keep file modes on the sandbox's overlay: python edits the file instead
        edit = "p = pathlib.Path('calc/__init__.py'); p.write_text(p.read_text().replace('>= high + 1', '> high'))"
        fix = f'python -c "import pathlib; {edit}" && grep -c "x > high" calc/__init__.py'
        observation, reward, done, _ = env.step(xml_call("execute_bash", command=fix))
        assert observation == "Execution output of [execute_bash]:\n1\n" and (reward, done) == (0.0, False)
        assert env.step("no call in this reply") == ("", 0, False, {})
        _, reward, done, info = env.step(xml_call("submit"))
        assert (reward, done, info["grade"]) == (1.0, True, "resolved") and env.compute_final_reward() == 1.0
    finally:
        env.close()


def test_swe_backends_rllm_lacks_are_named(calc_task):
    with pytest.raises(RllmError, match="backend='sandbox'.*backend='docker'"):
        SWEEnv(entry=calc_task, backend="kubernetes")
    r2e_gym_row = {"instance_id": "x", "problem_statement": "p", "expected_output_json": "{}", "docker_image": "i"}
    with pytest.raises(RllmError, match="R2E-Gym/SWE-Bench-Verified"):
        SWEEnv(entry=r2e_gym_row)
    with pytest.raises(ValueError, match="r2egym"):
        SWEAgent(scaffold="openhands")


# ---- web ----------------------------------------------------------------------------------------------------------


def page_of(messages: list[dict]) -> dict:
    """The goal and accessibility tree MiniWobAgent showed the model (what the oracle needs)."""
    goal = messages[0]["content"].split("# Goal\n", 1)[1].strip()
    tree = messages[-1]["content"].split("# The page (accessibility tree)\n", 1)[1].split("\n# ", 1)[0]
    return {"goal": goal, "axtree": tree}


@pytest.mark.browser
def test_miniwob_agent_clicks_the_right_button_in_headless_chromium(chromium):
    from rllm.tasks.web.oracle import oracle_action

    def reply(prompt, sampling):
        return f"The goal names the button.\nAction: ```{oracle_action('click-button', page_of(prompt))}```"

    rows = [{"id": "b3", "env_id": "browsergym/miniwob.click-button", "seed": 3}]
    [episode] = engine(MiniWobAgent, BrowserGymEnv, reply, max_steps=2).execute_tasks(rows)
    [step] = episode.trajectories[0].steps
    assert episode.is_correct and step.reward == 1.0 and step.done
    assert re.fullmatch(r"click\('e\d+'\)", step.action)
    with pytest.raises(RllmError, match="miniwob"):
        BrowserGymEnv(env_id="browsergym/webarena.310")


def test_miniwob_agent_keeps_the_last_block_and_shortens_the_conversation():
    agent = MiniWobAgent(use_full_conversation=False, use_accumulate_thinking=False)
    page = {
        "goal": "Click OK.",
        "axtree": '- button "OK" [ref=e3]',
        "url": "file:///ok.html",
        "last_action_error": None,
    }
    agent.update_from_env(page, 0.0, False, {})
    action = agent.update_from_model("<think>hm</think>first ```click('e1')``` then ```click('e3')```")
    agent.update_from_env({**page, "last_action_error": "no element e3"}, 0.0, False, {})
    assert action.action == "click('e3')" and agent.trajectory.steps[0].info["last_action_error"] == "no element e3"
    roles = [m["role"] for m in agent.chat_completions]
    assert roles == ["system", "user"] and "no element e3" in agent.chat_completions[-1]["content"]


# ---- competition coding -------------------------------------------------------------------------------------------


def test_coding_agent_is_graded_and_revises_from_the_failing_test():
    tests = '{"inputs": ["2 3\\n", "5 7\\n"], "outputs": ["5\\n", "12\\n"]}'
    row = {"question": "Read two integers and print their sum.", "ground_truth": tests, "data_source": "taco"}
    env, agent = CompetitionCodingEnv(task=row, max_turns=2), CompetitionCodingAgent()
    observation, info = env.reset()
    agent.reset()
    agent.update_from_env(observation, 0.0, False, info)
    wrong = "<think>multiply?</think>```python\na, b = map(int, input().split())\nprint(a * b)\n```"
    observation, reward, done, info = env.step(agent.update_from_model(wrong).action)
    agent.update_from_env(observation, reward, done, info)
    assert reward == 0.0 and not done
    feedback = agent.chat_completions[-1]["content"]
    assert "Test 1 failed" in feedback and "Expected: 5" in feedback
    assert agent.chat_completions[1]["content"].startswith("```python")  # earlier thinking dropped
    right = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    _, reward, done, _ = env.step(agent.update_from_model(right).action)
    assert (reward, done) == (1.0, True)


# ---- AppWorld -----------------------------------------------------------------------------------------------------


def test_appworld_agent_writes_code_and_reads_results():
    agent = AppWorldReactAgent()
    user = {"first_name": "Ada", "last_name": "Lovelace", "email": "ada@example.com", "phone_number": "+44 1"}
    agent.update_from_env({"instruction": "Count my playlists.", "user_info": user}, 0.0, False, {})
    prompt = "\n".join(m["content"] for m in agent.chat_completions)
    assert [m["role"] for m in agent.chat_completions] == ["system", "user"]
    assert all(text in prompt for text in ("Count my playlists.", "Ada Lovelace", "ada@example.com", "+44 1"))
    action = agent.update_from_model("First the APIs.\n```python\nprint(apis.api_docs.show_app_descriptions())\n```")
    assert action.action == "print(apis.api_docs.show_app_descriptions())"
    agent.update_from_env({"success": False, "error": "NameError: x"}, 0.0, False, {"step": 1})
    assert agent.chat_completions[-1]["content"].startswith("Error: NameError: x")
    assert agent.trajectory.steps[0].info == {"step": 1}


@pytest.mark.skipif(importlib.util.find_spec("appworld") is not None, reason="appworld is installed")
def test_appworld_env_without_the_library_names_the_install():
    with pytest.raises(RllmError, match="pip install appworld"):
        AppWorldEnv.from_dict({"task_id": "50e1ac9_1"})


def test_signal_patch_lets_a_thread_set_alarms():
    from rllm.environments.appworld.signal_patch import apply_signal_patch, restore_signal_functions

    errors, original = [], signal.alarm

    def set_alarm() -> None:
        try:
            signal.signal(signal.SIGALRM, lambda *_: None)
            signal.alarm(0)
        except ValueError as e:  # "signal only works in main thread"
            errors.append(e)

    assert apply_signal_patch(verbose=False)
    try:
        thread = threading.Thread(target=set_alarm)
        thread.start()
        thread.join()
    finally:
        assert restore_signal_functions()
    assert errors == [] and signal.alarm is original

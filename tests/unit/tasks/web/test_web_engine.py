"""WebAgent + WebEnv through the engine (AgentWorkflowEngine, agent_env), a scripted model acting as the oracle
would: rewards, trajectories, and a browser killed mid-episode retried as an infra error."""

from __future__ import annotations

import os
import re
import signal

import pytest

from rllm.engine.workflow_engine import AgentWorkflowEngine
from rllm.models.fake import FakeModel
from rllm.tasks.web.agent import WebAgent
from rllm.tasks.web.browser import chromium_pids
from rllm.tasks.web.env import WebEnv
from rllm.tasks.web.oracle import oracle_action
from rllm.workflows.agent_env import AgentEnvWorkflow

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _chromium(chromium):
    return chromium


def seen(prompt) -> dict:
    """The observation the agent last showed the model, read back from its user message."""
    text = prompt[-1]["content"]
    goal = re.match(r"Goal: (.*)", text).group(1)
    return {"goal": goal, "axtree": text.split("act on elements by their ref):\n", 1)[1]}


def engine(script) -> AgentWorkflowEngine:
    args = {"agent_class": WebAgent, "env_class": WebEnv, "max_steps": 3}
    return AgentWorkflowEngine(
        workflow_class=AgentEnvWorkflow, model=FakeModel(script), workflow_args=args, n_parallel=4, retry_backoff=0.0
    )


def test_episodes_through_the_engine_are_rewarded_by_the_page():
    rows = [{"id": f"b{seed}", "task": "click-button", "seed": seed} for seed in range(3)]
    rows.append({"id": "t0", "task": "enter-text", "seed": 0})

    def reply(prompt, sampling):
        goal = seen(prompt)["goal"]
        task = "enter-text" if goal.startswith("Enter") else "click-button"
        return "I will do it.\n```\n" + oracle_action(task, seen(prompt)) + "\n```"

    episodes = engine(reply).execute_tasks(rows)
    assert [e.trajectories[0].reward for e in episodes] == [1.0] * 4
    for episode in episodes:
        [step] = episode.trajectories[0].steps
        assert step.done and step.info["raw_reward"] == 1.0 and step.chat_completions[0]["role"] == "system"
        assert episode.metrics["infra_errors"] == 0


def test_a_browser_killed_mid_episode_is_retried():
    killed = []

    def reply(prompt, sampling):
        if not killed:  # the first call: the browser dies while the model thinks
            killed.extend(chromium_pids())
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
        return "```\n" + oracle_action("click-button", seen(prompt)) + "\n```"

    [episode] = engine(reply).execute_tasks([{"id": "b7", "task": "click-button", "seed": 7}])
    assert killed and episode.metrics["infra_errors"] == 1 and "browser failed" in episode.info["retry_errors"][0]
    assert episode.trajectories[0].reward == 1.0

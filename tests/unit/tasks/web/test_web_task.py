"""The `web` task's rows and split, and WebAgent's prompts (no browser: rllm.tasks.web's own tests drive Chromium)."""

from __future__ import annotations

import pytest

from rllm.tasks import get_task
from rllm.tasks.web import make_web_tasks
from rllm.tasks.web.actions import ACTIONS
from rllm.tasks.web.agent import WEB_SYSTEM_PROMPT, WebAgent
from rllm.tasks.web.miniwob import EASY_TASKS, VALIDATION_SIZE, family, split_tasks, task_names
from rllm.types import ModelOutput


def test_the_split_covers_every_page_once_and_keeps_families_together():
    split = split_tasks()
    train, validation = set(split["train"]), set(split["validation"])
    assert len(task_names()) == 130 and train | validation == set(task_names()) and not train & validation
    assert VALIDATION_SIZE <= len(validation) <= VALIDATION_SIZE + 3
    assert {family(t) for t in train}.isdisjoint({family(t) for t in validation})
    assert set(EASY_TASKS) <= train
    assert split == split_tasks()  # deterministic


def test_rows_are_seeded_and_cycle_through_the_split():
    rows = make_web_tasks(40, seed=3, split="val", reward="raw")
    assert rows == make_web_tasks(40, seed=3, split="val", reward="raw")
    assert rows != make_web_tasks(40, seed=4, split="val", reward="raw")
    names = [r["task"] for r in rows]
    assert set(names) == set(split_tasks()["validation"])  # 40 rows visit all 29 tasks
    assert all(r["reward"] == "raw" and r["id"] == f"{r['task']}-{r['seed']}" for r in rows)
    assert len({r["seed"] for r in rows}) == 40


def test_named_tasks_and_unknown_names():
    rows = make_web_tasks(6, seed=0, tasks=list(EASY_TASKS))
    assert sorted(r["task"] for r in rows) == sorted(EASY_TASKS * 2)
    with pytest.raises(ValueError, match="unknown MiniWoB.*click-test"):
        make_web_tasks(1, tasks=["click-tset"])


def test_the_registered_task_plays_with_web_agent_and_env():
    task = get_task("web")
    assert task.agent_class is WebAgent and task.env_class.__name__ == "WebEnv"


def test_the_agent_shows_goal_error_and_page_and_hands_the_reply_to_the_env():
    agent = WebAgent(max_observation_chars=300)
    assert all(f"{name}(" in WEB_SYSTEM_PROMPT for name in ACTIONS)
    observation = {
        "goal": "Click OK.",
        "axtree": '- button "OK" [ref=e5]\n' + "- text: filler\n" * 50,
        "last_action_error": "click('e9'): no element with ref 'e9' on the page now",
    }
    agent.update_from_env(observation, 0.0, False, {})
    shown = agent.chat_completions[-1]["content"]
    assert shown.startswith("Goal: Click OK.") and "no element with ref 'e9'" in shown and '"OK" [ref=e5]' in shown
    assert "page cut" in shown and len(shown) < 400
    action = agent.update_from_model(ModelOutput(text="```\nclick('e5')\n```"))
    assert action.action == "```\nclick('e5')\n```"
    with pytest.raises(TypeError, match="WebAgent.format_observation"):
        agent.update_from_env("a page", 0.0, False, {})

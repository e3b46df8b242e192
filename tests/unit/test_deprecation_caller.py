"""Every deprecation `rllm._deprecation` offers is attributed to the user's own line (issue 42 §5): Python's default
filters show a DeprecationWarning only when it points at `__main__`, so one attributed to a line inside rllm (a
subclass's `__init__` forwarding its keyword arguments, a config validator, the import system) is never seen.
Each case checks the warning's file and line, with every warning recorded (`simplefilter("always")`)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import rllm  # noqa: F401 - installs the moved-module finder
from rllm import _deprecation


def _next_line() -> int:
    """The line after the caller's: where the call that must warn is."""
    return sys._getframe(1).f_lineno + 1


@contextmanager
def _recorded() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _assert_attributed_here(caught: list[warnings.WarningMessage], line: int, old: str) -> None:
    """At least one deprecation names `old`, and each of those points at this file's `line`."""
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning) and old in str(w.message)]
    assert ours, f"no DeprecationWarning naming {old}: {[str(w.message) for w in caught]}"
    for warning in ours:
        assert (warning.filename, warning.lineno) == (__file__, line), str(warning.message)


@pytest.mark.parametrize("old", sorted(_deprecation.MOVED_MODULES))
def test_a_moved_module_warns_at_the_importing_line(old, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)  # it warns once per process: import it afresh
    with _recorded() as caught:
        line = _next_line()
        module = importlib.import_module(old)
    _assert_attributed_here(caught, line, f"module {old} ")
    assert module is importlib.import_module(_deprecation.MOVED_MODULES[old])
    sys.modules.pop(old, None)


@pytest.mark.parametrize("old", sorted(_deprecation.MOVED_NAMES))
def test_a_moved_name_warns_at_the_line_that_reads_it(old):
    module, _, name = old.rpartition(".")
    owner = importlib.import_module(module)
    with _recorded() as caught:
        line = _next_line()
        getattr(owner, name)
    _assert_attributed_here(caught, line, old)


@pytest.mark.parametrize("old", ["rllm.data", "rllm.tasks"])
def test_builtin_tasks_warns_at_the_line_that_reads_it(old):
    owner = importlib.import_module(old)
    with _recorded() as caught:
        line = _next_line()
        owner.BUILTIN_TASKS  # noqa: B018
    _assert_attributed_here(caught, line, f"{old}.BUILTIN_TASKS")


def _engines() -> dict[str, tuple[type, dict]]:
    from rllm import AgentExecutionEngine, AgentWorkflowEngine, BaseAgent, FakeModel
    from rllm.tasks.frozenlake import FrozenLakeEnv
    from rllm.workflows.single_turn import SingleTurnWorkflow

    return {
        "AgentWorkflowEngine": (AgentWorkflowEngine, {"workflow_class": SingleTurnWorkflow, "model": FakeModel("x")}),
        "AgentExecutionEngine": (
            AgentExecutionEngine,
            {"agent_class": BaseAgent, "env_class": FrozenLakeEnv, "model": FakeModel("up")},
        ),
    }


@pytest.mark.parametrize("engine", ["AgentWorkflowEngine", "AgentExecutionEngine"])
@pytest.mark.parametrize("old", ["n_parallel_tasks", "n_parallel_agents", "trajectory_timeout"])
def test_a_renamed_keyword_argument_warns_at_the_call(engine, old):
    """The issue's case: AgentExecutionEngine(n_parallel_agents=...) pointed into rllm/engine/execution.py."""
    from rllm.engine.workflow_engine import _RENAMED

    assert old in _RENAMED  # the table this test walks
    cls, required = _engines()[engine]
    given = {**required, old: 3}
    with _recorded() as caught:
        line = _next_line()
        cls(**given)
    _assert_attributed_here(caught, line, f"{engine}({old}=...)")


RENAMED_ATTRIBUTES = [("AgentWorkflowEngine", "n_parallel_tasks"), ("AgentExecutionEngine", "n_parallel_agents")]


@pytest.mark.parametrize("engine, old", RENAMED_ATTRIBUTES)
def test_a_renamed_attribute_warns_at_the_line_that_reads_it(engine, old):
    cls, required = _engines()[engine]
    instance = cls(**required)
    with _recorded() as caught:
        line = _next_line()
        getattr(instance, old)
    _assert_attributed_here(caught, line, f".{old}")


def test_a_renamed_config_key_warns_at_the_line_that_loads_the_config(tmp_path):
    """Three ways in: an override (`_apply_override`), a YAML file and Python (pydantic calls rllm's validator)."""
    from rllm.config import RolloutConfig, load_config

    with _recorded() as caught:
        line = _next_line()
        load_config(None, ["rollout.trajectory_timeout=5"])
    _assert_attributed_here(caught, line, "config key rollout.trajectory_timeout")
    path = tmp_path / "old.yaml"
    path.write_text("rollout:\n  backend: vllm\n", encoding="utf-8")
    with _recorded() as caught:
        line = _next_line()
        load_config(path)
    _assert_attributed_here(caught, line, "config key rollout.backend")
    with _recorded() as caught:
        line = _next_line()
        RolloutConfig(backend="vllm")
    _assert_attributed_here(caught, line, "config key rollout.backend")


def test_a_renamed_workflow_method_warns_at_the_workflows_line():
    """`Workflow.thread()` and `generate(thread=...)`, called from a user's workflow while the engine runs it."""
    from rllm import AgentWorkflowEngine, FakeModel, Step, Trajectory, Workflow

    lines: dict[str, int] = {}

    class OldStyle(Workflow):
        async def run(self, task, uid):
            messages = [{"role": "user", "content": "hi"}]
            lines["generate"] = _next_line()
            output = await self.generate(messages, thread="solver")
            lines["thread"] = _next_line()
            self.thread("solver")
            self.commit(Trajectory(steps=[Step(chat_completions=messages, model_output=output)]))

    engine = AgentWorkflowEngine(workflow_class=OldStyle, model=FakeModel("ok"))
    with _recorded() as caught:
        engine.execute_tasks([{}])
    _assert_attributed_here(caught, lines["generate"], "Workflow.generate(thread=...)")
    _assert_attributed_here(caught, lines["thread"], "Workflow.thread()")


def test_pythons_default_filters_show_it_to_a_script_run_with_python_m(tmp_path):
    """The point of all this: with no filter set, a user's `python -m their_script` sees the warning, at its line.
    (`python -m` runs the module as `__main__` with a loader that cannot give `__main__`'s source.)"""
    script = tmp_path / "old_engine_script.py"
    script.write_text(
        "from rllm import AgentExecutionEngine, BaseAgent, FakeModel\n"
        "from rllm.tasks.frozenlake import FrozenLakeEnv as Env\n"
        "AgentExecutionEngine(agent_class=BaseAgent, env_class=Env, model=FakeModel('up'), n_parallel_agents=2)\n",
        encoding="utf-8",
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    out = subprocess.run(
        [sys.executable, "-m", script.stem], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{script}:3: DeprecationWarning: AgentExecutionEngine(n_parallel_agents=...) is deprecated" in out.stderr

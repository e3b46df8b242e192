"""The moved-module finder of `rllm._deprecation`: an old path warns and yields the new module itself, untouched."""

from __future__ import annotations

import importlib
import sys

import pytest

import rllm  # noqa: F401 - installs the finder
from rllm import _deprecation


@pytest.fixture
def moved_types(monkeypatch):
    monkeypatch.setitem(_deprecation.MOVED_MODULES, "rllm._old_types", "rllm.types")
    monkeypatch.delitem(sys.modules, "rllm._old_types", raising=False)
    yield importlib.import_module("rllm.types")
    sys.modules.pop("rllm._old_types", None)


def test_old_path_warns_at_the_importing_line_and_is_the_new_module(moved_types):
    spec = moved_types.__spec__
    with pytest.warns(DeprecationWarning, match=r"module rllm\._old_types is deprecated.*use rllm\.types") as caught:
        import rllm._old_types as old  # the line the warning must point at
    assert old is moved_types and old.Episode is moved_types.Episode
    assert caught[0].filename == __file__
    assert moved_types.__spec__ is spec and moved_types.__name__ == "rllm.types"  # importing the old path left it


def test_old_path_warns_once_per_process(moved_types, recwarn):
    with pytest.warns(DeprecationWarning):
        importlib.import_module("rllm._old_types")
    importlib.import_module("rllm._old_types")
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


# ---- renamed names: each still works for one release and names its replacement ------------------------------


def test_renamed_engine_arguments_still_work():
    from rllm import AgentExecutionEngine, AgentWorkflowEngine, BaseAgent, FakeModel
    from rllm.tasks.frozenlake import FrozenLakeEnv
    from rllm.workflows.single_turn import SingleTurnWorkflow

    with pytest.warns(DeprecationWarning, match=r"n_parallel_agents=.*use AgentExecutionEngine\(n_parallel="):
        engine = AgentExecutionEngine(
            agent_class=BaseAgent, env_class=FrozenLakeEnv, model=FakeModel("up"), n_parallel_agents=3
        )
    assert engine.n_parallel == 3
    with pytest.warns(DeprecationWarning, match=r"trajectory_timeout=.*use AgentWorkflowEngine\(episode_timeout="):
        engine = AgentWorkflowEngine(
            workflow_class=SingleTurnWorkflow, model=FakeModel("x"), n_parallel=2, trajectory_timeout=4.0
        )
    assert engine.episode_timeout == 4.0
    with pytest.warns(DeprecationWarning, match="use n_parallel"):
        assert engine.n_parallel_tasks == 2


def test_thread_is_now_conversation():
    from rllm import AgentWorkflowEngine, FakeModel, Step, Trajectory, Workflow
    from rllm.workflows import runtime

    class OldStyle(Workflow):
        async def run(self, task, uid):
            messages = [{"role": "user", "content": "hi"}]
            output = await self.generate(messages, thread="solver")
            assert self.thread("solver") is self.conversation("solver")
            self.commit(Trajectory(steps=[Step(chat_completions=messages, model_output=output)]))

    engine = AgentWorkflowEngine(workflow_class=OldStyle, model=FakeModel("ok"))
    with pytest.warns(DeprecationWarning) as caught:
        (episode,) = engine.execute_tasks([{}])
    assert episode.termination_reason.value == "env_done"
    messages = [str(w.message) for w in caught]
    assert any("generate(thread=...)" in m and "use conversation=" in m for m in messages)
    assert any("Workflow.thread()" in m and "use Workflow.conversation()" in m for m in messages)
    with pytest.warns(DeprecationWarning, match="use rllm.workflows.runtime.Conversation"):
        assert runtime.ModelThread is runtime.Conversation


def test_renamed_config_keys_still_load_from_yaml_overrides_and_python(tmp_path):
    from rllm.config import ConfigError, RolloutConfig, load_config

    path = tmp_path / "old.yaml"
    path.write_text("rollout:\n  backend: vllm\n  trajectory_timeout: 30\n")
    with pytest.warns(DeprecationWarning) as caught:
        config = load_config(path)
    assert {str(w.message).split(" is deprecated")[0] for w in caught} == {
        "config key rollout.backend",
        "config key rollout.trajectory_timeout",
    }
    assert (config.rollout.server, config.rollout.episode_timeout) == ("vllm", 30)
    with pytest.warns(DeprecationWarning, match=r"rollout\.trajectory_timeout.*use rollout\.episode_timeout"):
        assert load_config(None, ["rollout.trajectory_timeout=5"]).rollout.episode_timeout == 5
    with pytest.warns(DeprecationWarning, match="rollout.server"):
        assert RolloutConfig(backend="vllm").server == "vllm"
    path.write_text("rollout:\n  backend: vllm\n  server: local\n")
    with pytest.raises(ConfigError, match="both given; keep only config key rollout.server"):
        load_config(path)


def test_load_metrics_moved_to_the_run_module():
    import rllm.training.trainer as trainer
    from rllm import runs

    with pytest.warns(DeprecationWarning, match=r"rllm\.training\.trainer\.load_metrics.*use rllm\.runs\.load_metrics"):
        assert trainer.load_metrics is runs.load_metrics
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        trainer.nothing_here  # noqa: B018


# ---- moved so that imports only point down the layers (pyproject.toml, [tool.importlinter]) ------------------------


@pytest.mark.parametrize(
    "old, new", [("rllm.workflows.rollout_fn", "rllm.gateway.rollout"), ("rllm.training.rft", "rllm.rft")]
)
def test_modules_moved_down_the_layers_still_import(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"module {old} is deprecated.*use {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_plain_state_name_moved_to_the_checkpoint_module():
    from rllm.training import checkpoint
    from rllm.training.backends import torch_model

    with pytest.warns(DeprecationWarning, match=r"torch_model\.plain_state_name.*use rllm\.training\.checkpoint\."):
        assert torch_model.plain_state_name is checkpoint.plain_state_name

"""rLLM v0.2's `rllm.utils`, `rllm.engine.AsyncAgentExecutionEngine` and `rllm.trainer`'s package-level names."""

from __future__ import annotations

import pytest

from rllm.errors import RllmError
from rllm.types import Step, Trajectory


def test_save_trajectories_writes_what_torch_load_gives_back(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from rllm.utils import save_trajectories

    results = [Trajectory(name="solver", steps=[Step(response_ids=[1, 2], reward=1.0)], reward=1.0)]
    path = save_trajectories(results, save_dir=str(tmp_path / "out"), filename="t.pt")
    assert path == str(tmp_path / "out" / "t.pt") and "Trajectories saved to" in capsys.readouterr().out
    (loaded,) = torch.load(path, weights_only=False)
    assert loaded == results[0] and loaded.steps[0].response_ids == [1, 2]


def test_colorful_print_and_the_trainer_hooks_that_are_not_here(capsys):
    from rllm.utils import EpisodeLogger, colorful_print, visualize_trajectories

    colorful_print("done", fg="green")
    assert "done" in capsys.readouterr().out
    for hook in (lambda: EpisodeLogger("logs"), lambda: visualize_trajectories(None, None, [0])):
        with pytest.raises(RllmError, match="rllm view"):
            hook()


def test_rllms_package_level_names():
    from rllm.compat.engine.agent_execution_engine import AgentExecutionEngine
    from rllm.engine import AsyncAgentExecutionEngine
    from rllm.trainer import AgentSFTTrainer, AgentTrainer
    from rllm.trainer.agent_sft_trainer import AgentSFTTrainer as SFTAtItsPath
    from rllm.trainer.agent_trainer import AgentTrainer as AtItsPath

    assert AsyncAgentExecutionEngine is AgentExecutionEngine
    assert AgentTrainer is AtItsPath and AgentSFTTrainer is SFTAtItsPath

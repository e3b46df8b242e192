"""`rllm train ... trainer.backend=verl` typed in the main environment (which has no verl): the command is handed
over to the verl environment (`make verl`) and trains on 2 verl workers; no Ray or vLLM process outlives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.runs import load_metrics
from tests.support.cli import run_rllm
from tests.support.processes import leftover_processes
from tests.support.training import TINY_BATCH

VERL_PYTHON = Path(".venv-verl/bin/python")


@pytest.mark.slow
@pytest.mark.skipif(not VERL_PYTHON.exists(), reason="the verl environment is not built (make verl)")
def test_the_issue_command_runs_on_two_verl_workers_from_the_main_environment(tmp_path, tiny_model_dir):
    out = run_rllm(
        "train",
        "configs/arithmetic_grpo.yaml",
        "trainer.backend=verl",
        "trainer.workers_per_node=2",
        "trainer.total_steps=2",
        *TINY_BATCH,
        f"model.name={tiny_model_dir}",
        f"trainer.run_dir={tmp_path}",
        "trainer.name=v",
        "--no-progress",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "val success rate" in out.stdout
    steps = [m for m in load_metrics(tmp_path / "v") if "reward_mean" in m]
    assert [m["weight_version"] for m in steps] == [1, 2] and all(m["loss_tokens"] > 0 for m in steps)
    shards = sorted(p.name for p in (tmp_path / "v" / "checkpoints" / "step_000002" / "verl").glob("model_*"))
    assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    assert not leftover_processes()

"""`rllm eval` then `rllm sft` on its episodes, in subprocesses, on a tiny random-init model folder: the supervised
pipeline as a user types it (and the TRL export)."""

from __future__ import annotations

import json
from pathlib import Path

from rllm.config import load_config
from rllm.runs import load_metrics
from tests.conftest import run_rllm

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "arithmetic_sft.yaml")


def test_sft_on_the_episodes_of_an_eval_run(tmp_path, tiny_model_dir):
    common = [f"model.name={tiny_model_dir}", f"trainer.run_dir={tmp_path / 'runs'}", "trainer.tensorboard=false"]
    out = run_rllm("eval", CONFIG, "data.val_size=4", "rollout.val_n=2", "trainer.name=attempts", *common,
                   cwd=tmp_path, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    attempts = tmp_path / "runs" / "attempts"
    # a random model solves nothing: the default filter (correct only) says so, with counts
    out = run_rllm("sft", CONFIG, f"sft.episodes={attempts}", "data.val_size=2", *common, "--no-progress",
                   cwd=tmp_path, timeout=300)  # fmt: skip
    assert out.returncode == 2 and "no trajectory succeeded" in out.stderr and "trajectories=8" in out.stderr
    out = run_rllm("sft", CONFIG, f"sft.episodes={attempts}", "sft.correct_only=false", "sft.batch_size=3",
                   "data.val_size=2", "trainer.name=sft", *common, "--no-progress", cwd=tmp_path,
                   timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "val success rate" in out.stdout
    run_dir = tmp_path / "runs" / "sft"
    stats = json.loads((run_dir / "sft_data.json").read_text())
    assert stats["after_max_per_task"] == 8 and stats["rows"] == 8  # max_per_task=2 keeps both attempts of 4 tasks
    steps = [m for m in load_metrics(run_dir) if "loss" in m]
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5, 6]  # 2 epochs x 8 rows / 3 a step
    assert load_config(run_dir / "config.yaml").sft.episodes == str(attempts)
    out = run_rllm("sft", CONFIG, f"sft.episodes={attempts}", "sft.correct_only=false", *common,
                   "--export-trl", str(tmp_path / "rows.jsonl"), cwd=tmp_path, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = (tmp_path / "rows.jsonl").read_text().splitlines()
    assert len(lines) == 8 and set(json.loads(lines[0])) == {"input_ids", "completion_mask"}

"""`rllm eval` then `rllm sft` / `rllm dpo` on its episodes, in subprocesses, on a tiny random-init model folder: the
offline pipelines as a user types them (and the TRL exports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllm.config import load_config
from rllm.runs import RunLog, load_metrics
from tests.support.cli import run_rllm
from tests.support.episodes import sampled_episode

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "arithmetic_sft.yaml")
DPO_CONFIG = str(ROOT / "configs" / "arithmetic_dpo.yaml")


def _common(tmp_path, tiny_model_dir):
    return [f"model.name={tiny_model_dir}", f"trainer.run_dir={tmp_path / 'runs'}", "trainer.tensorboard=false"]


@pytest.fixture(scope="module")
def attempts(tmp_path_factory, tiny_model_dir):
    """An eval run: two sampled attempts at each of four questions (a random model solves none)."""
    tmp_path = tmp_path_factory.mktemp("attempts")
    out = run_rllm(
        "eval",
        CONFIG,
        "data.val_size=4",
        "rollout.val_n=2",
        "trainer.name=attempts",
        *_common(tmp_path, tiny_model_dir),
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return tmp_path / "runs" / "attempts"


def test_sft_on_the_episodes_of_an_eval_run(tmp_path, tiny_model_dir, attempts):
    common = _common(tmp_path, tiny_model_dir)
    # a random model solves nothing: the default filter (correct only) says so, with counts
    out = run_rllm(
        "sft",
        CONFIG,
        f"sft.episodes={attempts}",
        "data.val_size=2",
        *common,
        "--no-progress",
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 2 and "no trajectory succeeded" in out.stderr and "trajectories=8" in out.stderr
    out = run_rllm(
        "sft",
        CONFIG,
        f"sft.episodes={attempts}",
        "sft.correct_only=false",
        "sft.batch_size=3",
        "sft.packing=true",
        "data.val_size=2",
        "trainer.name=sft",
        *common,
        "--no-progress",
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "val success rate" in out.stdout
    run_dir = tmp_path / "runs" / "sft"
    stats = json.loads((run_dir / "sft_data.json").read_text())
    assert stats["after_max_per_task"] == 8 and stats["rows"] == 8  # max_per_task=2 keeps both attempts of 4 tasks
    steps = [m for m in load_metrics(run_dir) if "loss" in m]
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5, 6]  # 2 epochs x 8 rows / 3 a step
    assert load_config(run_dir / "config.yaml").sft.episodes == str(attempts)
    # `--resume` without the config: the run's own (its data, its 6 steps), its config.yaml untouched
    config_yaml = (run_dir / "config.yaml").read_bytes()
    out = run_rllm("sft", "--resume", str(run_dir), "--no-progress", cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and "steps: 6" in out.stdout, out.stderr[-2000:]
    assert (run_dir / "config.yaml").read_bytes() == config_yaml
    out = run_rllm(
        "sft",
        CONFIG,
        f"sft.episodes={attempts}",
        "sft.correct_only=false",
        *common,
        "--export-trl",
        str(tmp_path / "rows.jsonl"),
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = (tmp_path / "rows.jsonl").read_text().splitlines()
    assert len(lines) == 8 and set(json.loads(lines[0])) == {"input_ids", "completion_mask"}


def test_dpo_on_the_pairs_of_a_run(tmp_path, tiny_model_dir, attempts):
    common = _common(tmp_path, tiny_model_dir)
    out = run_rllm("dpo", DPO_CONFIG, f"dpo.episodes={attempts}", *common, cwd=tmp_path, timeout=300)
    assert out.returncode == 2 and "no preference pairs" in out.stderr and "all failed=4" in out.stderr
    (tmp_path / "mixed").mkdir()
    log = RunLog(tmp_path / "mixed")  # a run whose tasks have both outcomes
    log.log_episodes(
        1, [sampled_episode(t, i, float(i % 2 == 0), turns=1 + i % 2) for t in "abc" for i in range(4)], "eval"
    )
    out = run_rllm(
        "dpo",
        DPO_CONFIG,
        f"dpo.episodes={tmp_path / 'mixed'}",
        "dpo.batch_size=2",
        "data.val_size=2",
        "trainer.name=dpo",
        *common,
        "--no-progress",
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    run_dir = tmp_path / "runs" / "dpo"
    assert json.loads((run_dir / "dpo_data.json").read_text())["pairs"] == 6  # 2 a task (max_pairs_per_task)
    assert [m["step"] for m in load_metrics(run_dir) if "rewards/margins" in m] == [1, 2, 3, 4, 5, 6]
    out = run_rllm(
        "dpo",
        DPO_CONFIG,
        f"dpo.episodes={tmp_path / 'mixed'}",
        *common,
        "--export-trl",
        str(tmp_path / "prefs.jsonl"),
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert len((tmp_path / "prefs.jsonl").read_text().splitlines()) == 6


def test_rft_in_one_command_and_its_resume(tmp_path, tiny_model_dir):
    common = [
        *_common(tmp_path, tiny_model_dir),
        "trainer.name=rft",
        "data.train_size=3",
        "data.val_size=2",
        "rft.attempts=2",
        "--no-progress",
    ]
    out = run_rllm("rft", CONFIG, *common, cwd=tmp_path, timeout=300)
    # a random model solves no task: nothing to keep, said with counts, and the attempts are kept for a retry
    assert out.returncode == 2 and "no trajectory succeeded" in out.stderr and "episodes=6" in out.stderr
    run_dir = tmp_path / "runs" / "rft"
    summary = run_dir / "attempts" / "summary.json"
    assert json.loads(summary.read_text())["episodes"] == 6
    written = summary.stat().st_mtime_ns
    out = run_rllm(
        "rft", CONFIG, *common[:-1], "sft.correct_only=false", "--resume", str(run_dir), cwd=tmp_path, timeout=300
    )
    assert out.returncode == 2 and "after_correct_only=0" in out.stderr  # rft keeps its own filter, attempts reused
    assert summary.stat().st_mtime_ns == written  # no second attempts pass

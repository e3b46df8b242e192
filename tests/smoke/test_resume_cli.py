"""`rllm train` stopped and resumed as a user does it, in subprocesses on a tiny random-init model folder: `--resume`
with the run's own config, Ctrl-C and SIGTERM, a failed start (issue 39, items 2, 3 and 6)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rllm.config import load_config
from rllm.errors import RllmError
from rllm.evaluation import evaluate
from rllm.runs import load_metrics
from rllm.training.trainer import AgentTrainer
from tests.support.cli import run_rllm
from tests.support.training import CONFIG, TINY_CLI


def _train_steps(run_dir: Path) -> list[int]:
    return [m["step"] for m in load_metrics(run_dir) if "reward_mean" in m]


def _one_error_line(out: subprocess.CompletedProcess, *expected: str) -> str:
    """The command failed with one `error: ...` line holding `expected`, and no traceback."""
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr[-2000:]
    assert all(text in lines[0] for text in expected), lines[0]
    return lines[0]


def test_a_failed_start_leaves_no_run_directory(tmp_path):
    """Item 6: a train or eval run whose model cannot load leaves nothing that `rllm view` would list as a stopped
    run, and the same trainer.name can be used again at once."""
    overrides = [*TINY_CLI, f"model.name={tmp_path / 'no-model'}", f"trainer.run_dir={tmp_path / 'runs'}"]
    for name in ("a", "a"):
        config = load_config(CONFIG, [*overrides, f"trainer.name={name}"])
        with pytest.raises(RllmError, match="unknown model"):
            AgentTrainer(config=config, progress=False).train()
        assert not (tmp_path / "runs" / name).exists()
    with pytest.raises(RllmError, match="unknown model"):
        evaluate(load_config(CONFIG, [*overrides, "trainer.name=e"]))
    assert not (tmp_path / "runs" / "e").exists()


def test_resume_trains_with_the_runs_own_config(tmp_path, tiny_model_dir):
    common = [CONFIG, *TINY_CLI, f"model.name={tiny_model_dir}", f"trainer.run_dir={tmp_path / 'runs'}"]
    run_dir = tmp_path / "runs" / "a"
    first = ["trainer.name=a", "trainer.total_steps=2", "trainer.stop_after=1", "--no-progress"]
    out = run_rllm("train", *common, *first, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    config_yaml = (run_dir / "config.yaml").read_bytes()

    # item 2: mistakes cost one line and load nothing
    started = time.monotonic()
    _one_error_line(run_rllm("train", "--resume", str(tmp_path / "notarun"), cwd=tmp_path), "notarun", "--resume")
    _one_error_line(
        run_rllm("train", CONFIG, "--resume", str(run_dir), cwd=tmp_path),  # the shipped config: Qwen
        "model.name",
        "rollout.n (2 in the run, 4 now)",
        "trainer.total_steps",
    )
    assert time.monotonic() - started < 30  # no model was loaded (each is an import and a config read)

    # no config file: the run's own, its first command's stop_after not inherited, a longer run recorded
    out = run_rllm("train", "--resume", str(run_dir), "trainer.total_steps=3", "--no-progress", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "steps: 3" in out.stdout and _train_steps(run_dir) == [1, 2, 3]
    assert (run_dir / "config.yaml").read_bytes() == config_yaml  # never rewritten
    (record,) = [json.loads(line) for line in (run_dir / "resumes.jsonl").read_text().splitlines()]
    assert record["step"] == 1 and record["changed"] == {"trainer.total_steps": [2, 3]}
    # every step was checkpointed (LoRA's default), at most trainer.keep_checkpoints (3) kept
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) == [f"step_00000{i}" for i in (1, 2, 3)]

    # the case: a run killed before its first checkpoint starts over with its own config, left as it was
    early = tmp_path / "runs" / "early"
    shutil.copytree(run_dir, early, ignore=shutil.ignore_patterns("checkpoints", "resumes.jsonl", "result.json"))
    config_yaml = (early / "config.yaml").read_bytes()
    out = run_rllm("train", "--resume", str(early), "--no-progress", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (early / "config.yaml").read_bytes() == config_yaml
    assert "steps: 2" in out.stdout and (early / "checkpoints" / "latest").read_text() == "step_000002"


def _start(tmp_path: Path, tiny_model_dir: Path, name: str, *extra: str) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "rllm.cli.main",
        "train",
        CONFIG,
        *TINY_CLI,
        f"model.name={tiny_model_dir}",
        f"trainer.run_dir={tmp_path / 'runs'}",
        f"trainer.name={name}",
        "trainer.total_steps=1000",
        *extra,
        "--no-progress",
    ]
    return subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_trained_step(process: subprocess.Popen, run_dir: Path, step: int) -> None:
    """Until step `step`'s training episodes are logged (its update is done)."""
    deadline = time.monotonic() + 240
    episodes = run_dir / "episodes.jsonl"
    while not (episodes.exists() and f'"step": {step}, "split": "train"' in episodes.read_text()):
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the run never trained its step"
        time.sleep(0.1)


def _last_line(process: subprocess.Popen, signum: int) -> str:
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signum, stderr[-2000:]  # 130 for SIGINT, 143 for SIGTERM, as a shell reports
    assert "Traceback" not in stderr, stderr[-3000:]
    return stderr.strip().splitlines()[-1]


def test_ctrl_c_and_sigterm_save_the_run_and_say_how_to_resume_it(tmp_path, tiny_model_dir):
    lora = _start(tmp_path, tiny_model_dir, "lora")  # LoRA: every step is saved, the step in progress dropped
    full = _start(tmp_path, tiny_model_dir, "full", "model.lora.enabled=false")  # a checkpoint every 10 minutes
    runs = tmp_path / "runs"
    _wait_for_trained_step(lora, runs / "lora", 2)
    lora.send_signal(signal.SIGINT)
    _wait_for_trained_step(full, runs / "full", 1)
    full.send_signal(signal.SIGTERM)

    line = _last_line(lora, signal.SIGINT)
    assert line.startswith("interrupted (SIGINT) ")
    assert line.endswith(f"; continue with: rllm train --resume {runs / 'lora'}")
    # the step in progress dropped ("during step 4, dropped: kept checkpoint step_000003") or, when the signal came
    # as a step ended, that step saved ("after step 3: saved checkpoint step_000003")
    kept = int(re.search(r"checkpoint step_(\d+)", line).group(1))
    assert kept >= 2 and (runs / "lora" / "checkpoints" / "latest").read_text() == f"step_{kept:06d}"
    line = _last_line(full, signal.SIGTERM)  # the step in progress is finished, then saved
    saved = int(line.split("after step ")[1].split(":")[0])
    assert line == (
        f"interrupted (SIGTERM) after step {saved}: saved checkpoint step_{saved:06d}; continue with: "
        f"rllm train --resume {runs / 'full'}"
    )
    assert saved >= 1 and (runs / "full" / "checkpoints" / "latest").read_text() == f"step_{saved:06d}"

"""Rejection-sampling fine-tuning as one command: `rllm rft CONFIG`.

    rllm rft configs/arithmetic_sft.yaml rft.attempts=4          # attempts -> keep -> SFT -> before/after
    run_rft(load_config(path))

1. Attempts: every training task (`data.train_size` from `data.seed`, or the first `rft.tasks`) is sampled
   `rft.attempts` times at `rft.temperature` by the model `rllm eval` would use (the base model, or
   `model.init_from`'s), written as the eval run `<run>/attempts`.
2. Keep: the successful trajectories of tasks with 0 < pass rate < 1 (`sft.task_pass_rate` is set to `mixed` and
   `sft.correct_only` to true; the other `sft` filters apply as configured, e.g. `sft.max_per_task`). Tasks always
   solved teach nothing new and tasks never solved give nothing to imitate: rLLM's `--filter "0 < avg < 1"`.
3. SFT on exactly their sampled tokens (`SFTTrainer`, the run `<run>/sft`), validated on the validation split
   before and after: the before/after table this command prints.

`--resume <run>` skips the attempts once they are complete (their summary.json is written last) and resumes the
SFT run from its checkpoint.

It lives here, above `rllm.training` and `rllm.evaluation`, because it drives both (the import layers in
pyproject.toml).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from rllm.config import TrainConfig, override_config
from rllm.runs import create_run_dir, holds_nothing, write_json, write_manifest

__all__ = ["run_rft"]


def run_rft(config: TrainConfig, *, resume: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Attempts, keep, SFT (module docstring); returns the SFT result plus the attempts' summary and run dirs."""
    if resume is not None:
        return _attempts_then_sft(config, Path(resume), progress)
    run_dir = create_run_dir(config.trainer.run_dir, config.trainer.name, "rft", config.data.task)
    write_manifest(run_dir, "rft", config)
    try:
        return _attempts_then_sft(config, run_dir, progress)
    except BaseException:  # failed or stopped before anything was kept: no empty run directory stays behind
        if holds_nothing(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _attempts_then_sft(config: TrainConfig, run_dir: Path, progress: bool) -> dict[str, Any]:
    from rllm.evaluation import evaluate
    from rllm.training.sft import SFTTrainer

    attempts_dir = run_dir / "attempts"
    tasks = config.data.make_tasks("train")[: config.rft.tasks]
    if not (attempts_dir / "summary.json").exists():
        shutil.rmtree(attempts_dir, ignore_errors=True)  # a killed attempts pass starts over
        keys = [
            f"trainer.run_dir={run_dir}",
            "trainer.name=attempts",
            f"rollout.val_n={config.rft.attempts}",
            f"rollout.val_temperature={config.rft.temperature}",
        ]
        sampling = override_config(config, keys, "rllm rft")
        evaluate(sampling, tasks=tasks, progress=progress)
    sft_dir = run_dir / "sft"
    keys = [
        f"trainer.run_dir={run_dir}",
        "trainer.name=sft",
        f"sft.episodes={attempts_dir}",
        "sft.messages=null",
        "sft.correct_only=true",
        "sft.task_pass_rate=mixed",
    ]
    if sft_dir.exists():
        keys.append(f"trainer.resume={sft_dir}")
    sft = override_config(config, keys, "rllm rft")
    result = SFTTrainer(config=sft, progress=progress).train()
    result["attempts"] = json.loads((attempts_dir / "summary.json").read_text())
    result["rft_run_dir"] = str(run_dir)
    write_json(run_dir / "result.json", result)
    return result

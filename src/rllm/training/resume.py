"""What `--resume` continues: a run trains with its own config, whatever config the resuming command is given.

    rllm train --resume runs/train-arithmetic-grpo-20261127-120000                      # the run's own config
    rllm train --resume runs/train-arithmetic-grpo-20261127-120000 trainer.total_steps=30   # + a resumable change

Choices:
- A run's `config.yaml` is written once, when the run is created, and never rewritten. A resumed run's config is that
  file plus the changes earlier resumes made, in order (`resumes.jsonl`, one line per resume that changed something:
  `{"time", "step", "changed": {key: [before, after]}}`).
- A config given to a resume (a file, overrides, or `AgentTrainer(config=...)`) may differ from the run's only in
  `RESUMABLE_KEYS`: how long it trains, how often it validates and saves, what it logs. Anything else (model, data,
  algorithm, sampling, optimizer, seed) would make the resumed steps a different experiment than the steps before
  them, so such a resume is refused, naming every differing key with both values.
- `PER_INVOCATION_KEYS` steer one command only (where the run is, `trainer.stop_after`): never compared, never
  recorded, and reset to their defaults when a resume starts from the run's own config.
- `rllm sft`/`dpo` compare the config they train with (their `trainer.total_steps` is computed from the data, their
  `algorithm` reset), which is also what they wrote to `config.yaml`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rllm.config import ConfigError, TrainConfig, TrainerConfig, load_config, override_config
from rllm.errors import RllmError
from rllm.fsutil import dumps_strict
from rllm.runs import is_unstarted_train_run, writing

__all__ = [
    "PER_INVOCATION_KEYS",
    "RESUMABLE_KEYS",
    "ResumeError",
    "check_resumed_config",
    "resume_run_dir",
    "run_config",
    "start_from_run_config",
]

RESUMES = "resumes.jsonl"
RESUMABLE_KEYS = (
    "trainer.total_steps",
    "trainer.val_every",
    "trainer.save_every",
    "trainer.save_every_minutes",
    "trainer.keep_checkpoints",
    "trainer.tensorboard",
    "trainer.log_episodes",
    "trainer.max_nonfinite_updates",
)
PER_INVOCATION_KEYS = ("trainer.resume", "trainer.stop_after", "trainer.run_dir", "trainer.name")


class ResumeError(RllmError):
    """`--resume` names something that cannot be resumed, or a config that would change the run."""


def resume_run_dir(path: str | Path) -> Path:
    """The run directory `--resume path` continues: `path` itself, or the run of a checkpoint folder
    (`<run>/checkpoints/step_N`). Checked before anything loads, so a mistyped path costs one line."""
    path = Path(path)
    if path.parent.name == "checkpoints" and (path / "manifest.json").exists():
        return path.parent.parent
    if not path.is_dir():
        raise ResumeError(
            f"--resume {path}: no such run directory; give a run under trainer.run_dir (e.g. "
            f"--resume runs/<run name>), as printed by the run ('run: ...')"
        )
    run_files = any((path / name).exists() for name in ("config.yaml", "manifest.json", "checkpoints"))
    if not run_files and not is_unstarted_train_run(path):  # (an empty folder: a run killed as it was created)
        raise ResumeError(
            f"--resume {path}: not a run directory (no config.yaml, manifest.json or checkpoints/); "
            "give one run's folder, e.g. --resume runs/<run name>"
        )
    return path


def run_config(run_dir: Path) -> TrainConfig:
    """The config run `run_dir` trains with: its `config.yaml` plus the changes recorded by earlier resumes."""
    path = run_dir / "config.yaml"
    if not path.exists():
        raise ResumeError(
            f"--resume {run_dir}: it has no config.yaml (it was stopped while being created); start "
            f"it again with the config it was started with: rllm train CONFIG --resume {run_dir}"
        )
    config = load_config(path)
    for record in _resume_records(run_dir):
        changes = [f"{key}={json.dumps(after)}" for key, (_, after) in record["changed"].items()]
        config = override_config(config, changes, f"{run_dir / RESUMES}")
    return config


def start_from_run_config(run_dir: Path, overrides: list[str]) -> TrainConfig:
    """The config a resume without a config file trains with: the run's own (`run_config`), its per-invocation keys
    back at their defaults (a `trainer.stop_after` of the first command does not stop every resume), then
    `overrides`."""
    defaults = TrainerConfig()
    reset = [f"{key}={json.dumps(getattr(defaults, key.split('.')[1]))}" for key in PER_INVOCATION_KEYS]
    return override_config(run_config(run_dir), [*reset, *overrides], "--resume + overrides")


def check_resumed_config(run_dir: Path, config: TrainConfig, step: int) -> None:
    """Refuse `config` when it differs from the run's own in a key outside `RESUMABLE_KEYS`, naming each; record
    the resumable changes in `resumes.jsonl` (so the next resume keeps them). A run without a readable config.yaml
    (killed while creating it) has nothing to compare with."""
    try:
        stored = run_config(run_dir)
    except (ResumeError, ConfigError):
        return
    changed = _differences(stored, config)
    refused = {key: values for key, values in changed.items() if key not in RESUMABLE_KEYS}
    if refused:
        shown = ", ".join(
            f"{key} ({_show(before)} in the run, {_show(after)} now)" for key, (before, after) in refused.items()
        )
        raise ResumeError(
            f"--resume {run_dir}: the config differs from the run's own ({run_dir / 'config.yaml'}) in "
            f"{shown}; resume with the run's config (drop the config file and those overrides) or "
            f"start a new run. Changeable on resume: {', '.join(RESUMABLE_KEYS)}"
        )
    if changed:
        record = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "step": step,
            "changed": {key: list(values) for key, values in changed.items()},
        }
        path = run_dir / RESUMES
        torn = path.exists() and not path.read_bytes().endswith(b"\n") and path.stat().st_size > 0
        with writing(path, run_dir), open(path, "a", encoding="utf-8") as f:  # after a torn line: a line of its own
            f.write(("\n" if torn else "") + dumps_strict(record, sort_keys=True) + "\n")


def _resume_records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / RESUMES
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line: that resume was killed while recording, and records again when resumed
    return records


def _differences(before: TrainConfig, after: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """{dotted key: (before, after)} of every leaf that differs, per-invocation keys aside."""
    old, new = _flatten(before.model_dump(mode="json")), _flatten(after.model_dump(mode="json"))
    keys = [key for key in {**old, **new} if key not in PER_INVOCATION_KEYS]
    return {key: (old.get(key), new.get(key)) for key in keys if old.get(key) != new.get(key)}


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else repr(value)

"""What `rllm train`, `sft`, `dpo` and `rft` share for `--resume` and for a run stopped by Ctrl-C or SIGTERM."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def load_run_config(config: str | None, overrides: list[str], resume: str | None, *, key: str = "trainer.resume"):
    """The config a command trains with. With `resume` the run directory is checked first (one line and no model
    loaded when it is not one), and without a config file the run's own config is the base (`rllm.training.resume`);
    `key` is the override that names the resumed run (None: the caller passes it on itself, as `rllm rft` does)."""
    from rllm.config import load_config

    if resume is None:
        return load_config(config, overrides)
    from rllm.training.resume import resume_run_dir, start_from_run_config

    run_dir = resume_run_dir(resume)
    if config is not None and "=" in config and not Path(config).exists():  # `--resume RUN key=value`: no config
        config, overrides = None, [config, *overrides]
    extra = [f"{key}={resume}"] if key else []
    if config is None:
        return start_from_run_config(run_dir, [*overrides, *extra])
    return load_config(config, [*overrides, *extra])


def report_interrupted(exc: Any, command: str, run_dir: Path | str | None = None) -> int:
    """One line for a run stopped by a signal (`rllm.training.interrupt.TrainingInterrupted`), naming the command
    that continues it; returns the exit code a shell expects (128 + the signal's number: 130, 143)."""
    print(exc.describe(command, run_dir), file=sys.stderr, flush=True)
    return exc.exit_code

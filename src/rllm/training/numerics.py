"""What a training run's float results depend on that the machine would otherwise choose, fixed for the run: torch's
intra-op thread count, and which kernel each linear layer shape runs.

    threads = fresh_run_threads(config)                     # a new run: chosen once, recorded in its manifest
    threads = resumed_run_threads(run_dir, config)          # --resume: the recorded count, whatever the load is now
    hold_threads(threads)                                   # rllm.cpus: every rollout and update runs it
    KernelChoice.from_record(recorded_kernels(manifest))    # --resume: the kernel paths the run chose (None: fresh)

Why: the local model's decode steps (small matrix products) and reductions split between threads round differently
with another thread count, so a run whose count followed the machine's load (`rllm.cpus.ThreadGovernor`) resumed
after a kill -9 with different weights in the last bits (issue 54: 0 of 13 save write points bitwise; 13 of 13 with 2
fixed threads). Nothing is left for the governor to adapt without changing results (`rllm.cpus`' docstring), so a
training run does not run it.

Choices:
- The count is `rllm.cpus.run_threads`: `inference.num_threads`, else a count the program set itself
  (`torch.set_num_threads`), else `OMP_NUM_THREADS`, else every usable core. Never the load.
- It is recorded in the run's `manifest.json` as `"numerics": {"torch_threads": N}` (written with the manifest, so
  no write of its own; a run made before this had none: its first resume records the count it chooses).
- A resume uses the recorded count even when it is more than the cores usable now, or than `OMP_NUM_THREADS` says:
  correctness over speed; one line says so.
- Asynchronous training (`rollout.max_staleness` > 0) runs its generation and its update at that count each, also
  while they overlap (the governor shared the cores between them then); what that costs was not measured.
- The kernel paths (`rllm.inference.kernels`: packed oneDNN or torch's default per linear shape, measured once per
  machine) are recorded by the trainer once the model is loaded (`"kernels"` in the manifest), and a resume makes
  that choice again from the record, whatever the machine's cache says now. A run recorded before the choice
  existed ran every shape packed, but has no record: its resume measures (or reads the cache), and may differ in
  the last bits.
- Only where `rllm.runtime` enables `fixed_training_threads` (the training commands do, by default): a library
  user's torch threads are the program's business, and `runtime.fixed_training_threads=false` gives bitwise resume
  up for the governor's speed on a busy machine. Then nothing is recorded or held.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from rllm import runtime
from rllm.config import TrainConfig
from rllm.cpus import run_threads, usable_cores
from rllm.runs import add_to_manifest, read_manifest

__all__ = [
    "KERNELS_KEY",
    "MANIFEST_KEY",
    "fresh_run_threads",
    "manifest_record",
    "recorded_kernels",
    "recorded_threads",
    "resumed_run_threads",
]

MANIFEST_KEY = "numerics"
KERNELS_KEY = "kernels"  # the trainer's `KernelChoice.record()`


def fresh_run_threads(config: TrainConfig) -> int | None:
    """The thread count a new run holds (`rllm.cpus.run_threads`), or None where the run holds none (module
    docstring). The caller records it with the manifest (`manifest_record`)."""
    if not runtime.options().fixed_training_threads:
        return None
    import torch

    return run_threads(config.inference.num_threads, torch.get_num_threads())


def resumed_run_threads(run_dir: Path, config: TrainConfig) -> int | None:
    """The thread count run `run_dir` computes with, for its `--resume`: the recorded one (said in one line when this
    machine would run fewer), else one chosen now and recorded (a run older than the record, or whose manifest a
    kill tore: `rllm.training.session` writes that manifest again, with it)."""
    chosen = fresh_run_threads(config)
    if chosen is None:
        return None
    manifest = read_manifest(run_dir)
    recorded = recorded_threads(manifest)
    if recorded is None:
        if manifest is not None and (run_dir / "config.yaml").exists():
            add_to_manifest(run_dir, MANIFEST_KEY, manifest_record(chosen))
        return chosen
    _say_if_not_what_this_machine_runs(run_dir, recorded)
    return recorded


def manifest_record(threads: int | None) -> dict[str, Any] | None:
    """What the manifest records of a run holding `threads` (None: nothing)."""
    return None if threads is None else {"torch_threads": threads}


def recorded_threads(manifest: dict[str, Any] | None) -> int | None:
    """The thread count a manifest records, or None (none recorded, or no readable manifest)."""
    record = (manifest or {}).get(MANIFEST_KEY)
    threads = record.get("torch_threads") if isinstance(record, dict) else None
    return threads if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1 else None


def recorded_kernels(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The kernel choice a manifest records (`KernelChoice.record()`), or None."""
    record = (manifest or {}).get(KERNELS_KEY)
    return record if isinstance(record, dict) else None


def _say_if_not_what_this_machine_runs(run_dir: Path, recorded: int) -> None:
    cores = usable_cores()
    if recorded > cores:
        warnings.warn(
            f"--resume {run_dir}: it computes with {recorded} torch threads (its manifest.json), more than the "
            f"{cores} cores usable here: slower, but its results repeat the uninterrupted run's bitwise",
            RuntimeWarning,
            stacklevel=3,
        )
    elif os.environ.get("OMP_NUM_THREADS", str(recorded)) != str(recorded):
        warnings.warn(
            f"--resume {run_dir}: it computes with {recorded} torch threads (its manifest.json), not "
            f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}: a run keeps its count so that it repeats bitwise",
            RuntimeWarning,
            stacklevel=3,
        )

"""`RunSession`: one training run's life outside the RL step: its run directory (fresh, resumed or restarted),
checkpoints, Ctrl-C and SIGTERM, and the clean-up of a start that failed.

    session = RunSession(config, "train")
    session.run(main, current_step)        # asyncio.run(main()); stopped by a signal -> TrainingInterrupted
    checkpoint = session.open(name_parts)  # in main: the run directory; the checkpoint to resume from, or None
    session.torch_threads                  # ... and the thread count the run holds (rllm.training.numerics)
    session.kernels_record                 # ... and a resumed run's kernel choice (ditto; None: choose it)
    step, state = session.load(checkpoint, backend)  # into the backend; returns the trainer's part
    session.save(step, state, backend)     # atomically (rllm.training.checkpoint), then old ones pruned

Choices:
- A checkpoint every step with LoRA, by time otherwise (`save_due`; at most `trainer.keep_checkpoints` kept).
- The first SIGINT/SIGTERM (`on_stop_signal`): when the state before the step in progress is on disk (or nothing
  was trained yet), that step is abandoned (the run's task is cancelled at its next await); else the step is
  finished, saved, and the run stops. Either way `run` raises `TrainingInterrupted` after the clean-up
  (`rllm.training.interrupt`). A second signal aborts at once.
- A resumed run keeps its own config (`rllm.training.resume`), its torch thread count and its kernel choice
  (`rllm.training.numerics`, recorded in the manifest); a run killed before its first checkpoint starts over in
  its own directory (`_restart`).
- A fresh run that fails or stops before it logged anything removes its directory (`remove_failed_start`).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import time
import warnings
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rllm import runs
from rllm.config import TrainConfig
from rllm.runs import RunWriteError, create_run_dir, is_unstarted_train_run, write_manifest, writing
from rllm.training.checkpoint import (
    find_resumable_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    verify_checkpoint,
)
from rllm.training.interrupt import TrainingInterrupted, say, stop_signals
from rllm.training.numerics import fresh_run_threads, manifest_record, recorded_kernels, resumed_run_threads
from rllm.training.resume import ResumeError, check_resumed_config, resume_run_dir

__all__ = ["RunSession", "StoppedBySignal", "rng_state", "seed_everything", "set_rng_state"]


class StoppedBySignal(Exception):
    """Raised out of the run's task when a signal stopped it; `RunSession.run` turns it into `TrainingInterrupted`
    once the clean-up is done. `abandoned`: the step in progress that was dropped (None: stopped between steps)."""

    def __init__(self, abandoned: int | None) -> None:
        super().__init__(abandoned)
        self.abandoned = abandoned


class RunSession:
    def __init__(self, config: TrainConfig, run_kind: str) -> None:
        self.config = config
        self.run_kind = run_kind  # the manifest's kind ("train"; rllm.training.sft's "sft")
        self.run_dir: Path | None = None
        self.resumed_from: Path | None = None  # the checkpoint this run continues
        self.saved_step: int | None = None  # the step of the newest checkpoint on disk
        self.last_save_time = time.monotonic()
        self.created = False  # this process made run_dir (a failed start removes it while still empty)
        self.removed = False  # ... and removed it
        self.stop_signal: int | None = None  # the SIGINT/SIGTERM that asked the run to stop
        self.signals = 0  # SIGINT/SIGTERM received; the second aborts at once
        self.main_task: asyncio.Task | None = None
        self.torch_threads: int | None = None  # the thread count the run holds (rllm.training.numerics), if any
        self.kernels_record: dict[str, Any] | None = None  # a resumed run's recorded kernel choice (ditto)

    # ---- the run as a whole ---------------------------------------------------------------------------------

    def run(self, main: Callable[[], Coroutine[Any, Any, Any]], current_step: Callable[[], int]) -> Any:
        """`asyncio.run(main())` with Ctrl-C and SIGTERM handled (`on_stop_signal`); a run they stopped raises
        `TrainingInterrupted` once its clean-up is done. `current_step`: the last step trained."""

        async def supervised() -> Any:
            self.main_task = asyncio.current_task()
            return await main()

        try:
            with stop_signals(lambda signum: self.on_stop_signal(signum, current_step())):
                return asyncio.run(supervised())
        except RunWriteError as exc:  # a full disk: one line, and no --resume of a run its failed start removed
            if self.removed:
                raise exc.not_resumable() from exc.__cause__
            raise
        except (StoppedBySignal, KeyboardInterrupt) as exc:
            if self.stop_signal is None:  # not ours (no handler in this thread, or raised by user code)
                raise
            # after the run's clean-up (a run directory that held nothing yet is gone): the one line to show
            abandoned = exc.abandoned if isinstance(exc, StoppedBySignal) else current_step() + 1
            raise TrainingInterrupted(
                self.stop_signal, self.run_dir, self.saved_step, abandoned=abandoned, removed=self.removed
            ) from None

    def on_stop_signal(self, signum: int, step: int) -> None:
        """A SIGINT/SIGTERM (`rllm.training.interrupt`; runs in the main thread between two bytecodes) while step
        `step` is the last one trained. The first: when that state is on disk (or nothing was trained yet), the step
        in progress is abandoned (the run's task is cancelled at its next await); else it is finished, saved, and
        the run stops."""
        self.signals += 1
        if self.signals > 1:
            return  # stop_signals raises KeyboardInterrupt: stopped at once
        self.stop_signal = signum
        task = self.main_task
        if task is None or task.done():
            return  # not started yet: the loop sees the flag
        if step == 0 or self.saved_step == step:
            task.cancel()
            task.get_loop().call_soon_threadsafe(lambda: None)  # wake the loop if it waits in select()
        else:
            last = f"step_{self.saved_step:06d}" if self.saved_step else "none yet"
            say(
                f"{signal.Signals(signum).name}: finishing step {step + 1}, then saving a checkpoint and stopping "
                f"(again to stop at once; the last checkpoint on disk: {last})"
            )

    def cancelled_by_stop_signal(self) -> bool:
        """Whether a `CancelledError` in the run is the first signal's abandoning of its step (not someone else's
        cancellation, nor asyncio.run's clean-up after an abort)."""
        return self.stop_signal is not None and self.signals == 1

    # ---- the run directory ----------------------------------------------------------------------------------

    def open(self, name_parts: tuple[str, ...]) -> Path | None:
        """The run directory: the resumed one (`trainer.resume`), started over when it was killed before its first
        checkpoint, else a new one named `name_parts`. Returns the checkpoint to resume from (None: step 0)."""
        cfg = self.config
        checkpoint = None
        if cfg.trainer.resume:
            resume_run_dir(cfg.trainer.resume)  # a path that is no run: one line, before anything loads
            checkpoint = _find_checkpoint(Path(cfg.trainer.resume))
        self.resumed_from = checkpoint
        if checkpoint is not None:
            self.run_dir = checkpoint.parent.parent
            check_resumed_config(self.run_dir, cfg, _checkpoint_step(checkpoint))
            self.torch_threads = resumed_run_threads(self.run_dir, cfg)
            self.kernels_record = recorded_kernels(runs.read_manifest(self.run_dir))
        elif cfg.trainer.resume:
            check_resumed_config(Path(cfg.trainer.resume), cfg, 0)
            self.torch_threads = resumed_run_threads(Path(cfg.trainer.resume), cfg)
            self.kernels_record = recorded_kernels(runs.read_manifest(Path(cfg.trainer.resume)))
            self._restart(Path(cfg.trainer.resume))
        else:
            self.run_dir = create_run_dir(cfg.trainer.run_dir, cfg.trainer.name, *name_parts)
            self.created = True
            self.torch_threads = fresh_run_threads(cfg)
            write_manifest(self.run_dir, self.run_kind, cfg, manifest_record(self.torch_threads))
        self.last_save_time = time.monotonic()
        return checkpoint

    def _restart(self, run_dir: Path) -> None:
        """`--resume` of a run killed before its first checkpoint: it starts over in its own directory, what it
        logged is dropped (it is logged again). Its config.yaml (written atomically) is kept, never rewritten; only
        a run killed before it was written gets it (and the manifest, written just before it) now."""
        self.run_dir = run_dir
        with writing(run_dir, run_dir):
            runs.drop_logs(run_dir)
        if not (run_dir / "config.yaml").exists():
            write_manifest(run_dir, self.run_kind, self.config, manifest_record(self.torch_threads))

    def remove_failed_start(self) -> None:
        """A run this process created that failed or was stopped before it logged anything (model not found, bad
        workflow, Ctrl-C while loading) leaves no directory behind: `rllm view` would list it as a stopped run, and
        a retry with the same trainer.name would be refused."""
        if self.created and self.run_dir is not None and self.run_dir.is_dir():
            if runs.holds_nothing(self.run_dir):
                shutil.rmtree(self.run_dir, ignore_errors=True)
                self.removed = not self.run_dir.exists()  # a read-only disk keeps it

    # ---- checkpoints ----------------------------------------------------------------------------------------

    def load(self, checkpoint: Path, backend: Any) -> tuple[int, dict[str, Any]]:
        """`checkpoint` (verified) into `backend`; returns its step and the trainer's part of it."""
        step, parts = load_checkpoint(checkpoint)
        backend.load(checkpoint)
        self.saved_step = step
        return step, parts["trainer"]

    def save(self, step: int, trainer_state: dict[str, Any], backend: Any) -> None:
        """Step `step`'s checkpoint: the backend's files and the trainer's state, installed atomically; then only
        the newest `trainer.keep_checkpoints` are kept."""
        save_checkpoint(self.run_dir, step, {"trainer": trainer_state}, write=backend.save)
        self.saved_step, self.last_save_time = step, time.monotonic()
        prune_checkpoints(self.run_dir, self.config.trainer.keep_checkpoints)

    def save_due(self, step: int) -> bool:
        """`trainer.save_every` steps; automatic (null): every step with LoRA (a small checkpoint, ~0.2 s for the
        adapters of SmolLM2-135M or Qwen2.5-0.5B with their AdamW moments on a 2-core CPU), else once
        `trainer.save_every_minutes` have passed since the last save: full fine-tuning (SmolLM2-135M's checkpoint is
        1.5 GiB, ~5 s; Qwen2.5-0.5B's 7 GiB, ~20 s), and asynchronous training (`rollout.max_staleness` > 0), whose
        saves wait for the rollouts in flight and so would take the overlap away at every step."""
        cfg = self.config.trainer
        if cfg.save_every is not None:
            return cfg.save_every > 0 and step % cfg.save_every == 0
        if self.config.model.lora.enabled and not self.config.rollout.max_staleness:
            return True
        return time.monotonic() - self.last_save_time >= 60 * cfg.save_every_minutes


def _find_checkpoint(path: Path) -> Path | None:
    """`--resume` of a checkpoint folder (used as it is, once verified) or of a run directory (its newest intact
    checkpoint, after repairing what a killed save left; every repair and skipped damaged checkpoint is said). None
    for a training run directory killed before its first checkpoint: that run starts over."""
    if (path / "manifest.json").exists() and path.parent.name == "checkpoints":
        verify_checkpoint(path)
        return path
    found, notes = find_resumable_checkpoint(path)
    for note in notes:
        warnings.warn(f"--resume {path}: {note}", RuntimeWarning, stacklevel=2)
    if found is None:
        if not is_unstarted_train_run(path):
            raise ResumeError(
                f"--resume {path}: no checkpoint found (expected {path}/checkpoints/latest) and it is "
                "not a training run stopped before its first one; give a training run's folder"
            )
        warnings.warn(
            f"--resume {path}: the run was stopped before its first checkpoint; it starts over",
            RuntimeWarning,
            stacklevel=2,
        )
    return found


def _checkpoint_step(checkpoint: Path) -> int:
    """The step of a (verified) checkpoint folder, from its manifest: nothing is loaded."""
    return int(json.loads((checkpoint / "manifest.json").read_text(encoding="utf-8"))["step"])


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's global generators from the run's seed, before anything is built."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """The global generators' states, part of every checkpoint: a resumed run draws what the uninterrupted one would."""
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])

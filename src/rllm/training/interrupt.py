"""Ctrl-C and SIGTERM (what a cluster scheduler sends before it preempts a job) stop a training run with its state
saved and one line that says how to continue it.

The first signal asks the trainer to stop (`rllm.training.session.RunSession.on_stop_signal`): when the state at the
start of the step in progress is already checkpointed (the default with LoRA: every step is), that step is abandoned
at once (the trainer's task is cancelled at its next `await`; a save is synchronous, so it is never cut); otherwise
the step is finished, saved, and the run stops. A second signal aborts at once (`KeyboardInterrupt` from the
handler; the last checkpoint on disk is what a resume continues, as after a kill -9). Either way the command exits
with 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports a process killed by it, with no
traceback.

Handlers are installed only in the main thread (Python delivers signals there); a trainer run in another thread
leaves them alone.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rllm.errors import RllmError

__all__ = ["STOP_SIGNALS", "TrainingInterrupted", "stop_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(eq=False)  # an exception: hashable, compared by identity
class TrainingInterrupted(RllmError):
    """A run stopped by a signal: `step` is the step its last checkpoint holds (None: no checkpoint yet),
    `abandoned` the step that was in progress and dropped (None: the run stopped between steps), `removed` whether
    the run directory held nothing yet and was removed."""

    signum: int
    run_dir: Path | None
    step: int | None
    abandoned: int | None = None
    removed: bool = False

    def __post_init__(self) -> None:
        super().__init__(self.describe("rllm train"))

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)

    def describe(self, command: str, run_dir: Path | str | None = None) -> str:
        """One line: what was kept, and the command (`rllm train`, `rllm sft`, ...) that continues the run."""
        name = signal.Signals(self.signum).name
        where = run_dir or self.run_dir
        if self.removed or where is None:
            return f"interrupted ({name}) before the run started: nothing to keep; start again with the same command"
        continue_with = f"continue with: {command} --resume {where}"
        if not self.step:
            return f"interrupted ({name}) before the first checkpoint (the run starts over); {continue_with}"
        checkpoint = f"step_{self.step:06d}"
        if self.abandoned:
            dropped = f"during step {self.abandoned}, dropped"
            return f"interrupted ({name}) {dropped}: kept checkpoint {checkpoint}; {continue_with}"
        return f"interrupted ({name}) after step {self.step}: saved checkpoint {checkpoint}; {continue_with}"


@contextlib.contextmanager
def stop_signals(on_signal: Callable[[int], None]) -> Iterator[None]:
    """While inside: each SIGINT/SIGTERM calls `on_signal(signum)` (in the main thread, between two bytecodes: it
    must only set state or schedule work); the second then raises `KeyboardInterrupt`. The previous handlers come
    back on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handle(signum: int, frame: object) -> None:
        received.append(signum)
        on_signal(signum)
        if len(received) > 1:
            raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def say(message: str) -> None:
    """A line for the user at once (stderr; the progress bar is on stderr too)."""
    print(message, file=sys.stderr, flush=True)

"""rLLM v0.2's `rllm.environments.appworld.signal_patch`: let a library that sets signal handlers and alarms for its
own timeouts (AppWorld does) run outside the main thread, where `signal.signal` raises. After `apply_signal_patch()`,
`signal.signal`, `signal.alarm` and `signal.setitimer` called from another thread do nothing (the library's timeout
is then off: the engine's step timeout bounds the step instead); from the main thread they work as before.
`restore_signal_functions()` undoes it."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

__all__ = ["SignalPatch", "apply_signal_patch", "is_patch_applied", "restore_signal_functions"]

_log = logging.getLogger(__name__)
_PATCHED = ("signal", "alarm", "setitimer", "getsignal")
_originals: dict[str, Any] = {}
_NO_TIMER = (0.0, 0.0)


def _off_main_thread() -> bool:
    return threading.current_thread() is not threading.main_thread()


def _guard(name: str, original: Any) -> Any:
    """`original` on the main thread; elsewhere a no-op giving what the call gives when nothing was set."""
    idle = {"signal": signal.SIG_DFL, "getsignal": signal.SIG_DFL, "alarm": 0, "setitimer": _NO_TIMER}[name]

    def guarded(*args: Any, **kwargs: Any) -> Any:
        return idle if _off_main_thread() else original(*args, **kwargs)

    guarded.__name__ = name
    return guarded


def apply_signal_patch(verbose: bool = True) -> bool:
    """Patch the signal functions (see the module docstring); False if they already were."""
    if _originals:
        return False
    for name in _PATCHED:
        if hasattr(signal, name):
            _originals[name] = getattr(signal, name)
            setattr(signal, name, _guard(name, _originals[name]))
    if verbose:
        _log.info("signal functions patched: no-ops outside the main thread")
    return True


def restore_signal_functions() -> bool:
    """Put the original signal functions back; False if they were not patched."""
    if not _originals:
        return False
    for name, original in _originals.items():
        setattr(signal, name, original)
    _originals.clear()
    return True


def is_patch_applied() -> bool:
    return bool(_originals)


class SignalPatch:
    """The patch for the duration of a `with` block."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose, self.applied = verbose, False

    def __enter__(self) -> SignalPatch:
        self.applied = apply_signal_patch(self.verbose)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.applied:
            restore_signal_functions()

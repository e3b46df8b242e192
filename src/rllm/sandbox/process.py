"""The process plumbing every sandboxed run shares: the one-shot runs of `rllm.sandbox.runner` and the long-lived
sessions of `rllm.sandbox.session` and the SWE environments (`rllm.tasks.swe`). A capped output buffer, the
kill that takes a run down with everything it started, reading bwrap's status channel, exit codes and signals, and
the host Python that the sandbox exposes read-only. One module below both, so that neither reaches into the other's
private names.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from rllm.sandbox._cgroup import Cgroup

__all__ = ["CappedBuffer", "bwrap_status", "host_python", "kill_run", "signal_of"]


class CappedBuffer:
    """Bytes read from a pipe, kept up to `cap`; `add` says when the cap is exceeded (the run is then killed)."""

    def __init__(self, cap: int) -> None:
        self.cap, self.chunks, self.size = cap, [], 0

    def add(self, data: bytes) -> bool:
        """Keep data up to the cap; False once the cap is exceeded."""
        self.chunks.append(data[: max(0, self.cap - self.size)])
        self.size += len(data)
        return self.size <= self.cap

    def value(self) -> bytes:
        return b"".join(self.chunks)


def kill_run(proc: subprocess.Popen, pidfd: int, cgroup: Cgroup | None, init_pid: int | None) -> None:
    """SIGKILL the run and reap the launcher. bwrap's init goes first: its pid namespace dies with it and bwrap, still
    alive, reaps it and exits. Killing bwrap first would hand the init to PID 1, which may never reap it (a container
    whose PID 1 is the trainer). Then the launcher's process group and whatever is left in the cgroup."""
    if proc.returncode is None:  # once reaped, the launcher's pid (our process group's id) may be someone else's
        if init_pid and not select.select([pidfd], [], [], 0)[0]:
            _kill_child(init_pid, proc.pid)
            select.select([pidfd], [], [], 1.0)  # bwrap exits once its init is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if cgroup:
        cgroup.kill()
    proc.wait()


def _kill_child(pid: int, parent: int) -> None:
    """SIGKILL pid through a pidfd, only if it is still parent's child: a recycled pid is never hit."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        pidfd = os.pidfd_open(pid)
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            if int(next(line for line in status if line.startswith("PPid:")).split()[1]) == parent:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)


def bwrap_status(status: bytes, key: str) -> int | None:
    """A field bwrap reported on --json-status-fd: "child-pid" (its init's host pid) once the sandbox exists,
    "exit-code" once the program ran; None when missing (no exit code: a setup failure)."""
    for line in status.decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            if (value := json.loads(line).get(key)) is not None:
                return value
    return None


def signal_of(code: int) -> tuple[int, str | None]:
    """(exit_code, reason) of a raw code: death by signal N is -N, whether from Popen (-N) or bwrap (128+N)."""
    number = -code if code < 0 else code - 128 if 128 < code < 128 + signal.NSIG else 0
    try:
        name = signal.Signals(number).name
    except ValueError:
        return code, None
    return -number, "timeout" if number == signal.SIGXCPU else f"signal:{name}"


@functools.cache
def host_python() -> tuple[str, str]:
    """(installation prefix, interpreter) of the Python running rllm; a venv's are its base installation's."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    if not exe.startswith(prefix + "/"):
        exe = f"{prefix}/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    return prefix, exe

"""`SandboxSession`: one long-lived program in the sandbox, spoken to in JSON lines over its stdin and stdout.

An SWE episode keeps one (the way Docker-based environments keep a container per episode): the repository's
writable layer lives on a tmpfs inside it for the whole episode, and each tool call is a request to the program
rather than a new sandbox (no start-up cost per call). Everything `Sandbox.run` guarantees holds for the session as
a whole: namespaces, uid 65534, the seccomp filter, a cgroup (memory, pids) for everything in it, rlimits, and a
wall clock (`limits.wall_s`) for its whole life. `close()` kills all of it, and so does our exit (bwrap's
--die-with-parent); nothing is left on the host.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import selectors
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rllm.errors import InfraError
from rllm.sandbox.process import CappedBuffer, bwrap_status, kill_run, signal_of

__all__ = ["SandboxSession", "SessionClosedError"]

_MAX_REPLY = 16 << 20  # one reply line; the program caps what it sends far below this


@functools.cache
def _spawner() -> ThreadPoolExecutor:
    """The thread every session's sandbox is started from. bwrap's --die-with-parent (PR_SET_PDEATHSIG) fires when
    the *thread* that started it ends, not the process: a session opened from a short-lived worker thread would die
    with that thread. This one is never shut down."""
    return ThreadPoolExecutor(1, thread_name_prefix="rllm-sandbox-spawner")


class SessionClosedError(InfraError):
    """The session's program is gone (killed for memory or pids, timed out, crashed) or stopped answering.
    `reason` says which: "memory", "pids", "timeout", "no_reply", "exit:<code>", "signal:<name>", "closed"."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class SandboxSession:
    """Made by `Sandbox.session(...)`. `request(message, timeout_s)` sends one JSON object and returns the one
    JSON object the program answers with; `close()` ends the session. Not thread-safe: one request at a time."""

    def __init__(self, sandbox, argv, files, limits, layout) -> None:
        self.limits = limits
        self._stack = contextlib.ExitStack()
        self._closed_reason: str | None = None
        self._lock = threading.Lock()
        try:  # started from one thread that lives as long as the process: see _spawner
            self._run = _spawner().submit(sandbox._spawn, argv, files, limits, layout, self._stack).result()
        except BaseException:
            self._stack.close()
            raise
        self._stderr = CappedBuffer(limits.output_bytes)
        self._buffer = b""
        self._drainer = threading.Thread(target=self._drain, daemon=True, name="rllm-sandbox-session")
        self._drainer.start()
        self._timer = threading.Timer(limits.wall_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    # ---- talking to the program ---------------------------------------------------------------------------------

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._closed_reason is not None:
            raise self._closed_error()
        proc = self._run.proc
        try:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._finish(self._exit_reason())
            raise self._closed_error() from None
        line = self._read_line(time.monotonic() + timeout_s)
        try:
            reply = json.loads(line)
        except ValueError:
            self._finish("bad_reply")
            raise SessionClosedError(
                f"the sandboxed program answered something not JSON: {line[:200]!r}", "bad_reply"
            ) from None
        if not isinstance(reply, dict):
            self._finish("bad_reply")
            raise SessionClosedError(
                f"the sandboxed program answered {type(reply).__name__}, not an object", "bad_reply"
            )
        return reply

    def _read_line(self, deadline: float) -> bytes:
        fd = self._run.proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    self._finish("no_reply")
                    raise self._closed_error()
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self._finish(self._exit_reason())
                    raise self._closed_error()
                self._buffer += chunk
                if len(self._buffer) > _MAX_REPLY:
                    self._finish("output_limit")
                    raise self._closed_error()
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    # ---- the end ----------------------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._closed_reason is None and self._run.proc.poll() is None

    @property
    def stderr(self) -> bytes:
        return self._stderr.value()

    def close(self) -> None:
        self._finish("closed")

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _expire(self) -> None:
        self._finish("timeout")

    def _finish(self, reason: str) -> None:
        with self._lock:
            if self._closed_reason is not None:
                return
            self._closed_reason = reason
            self._timer.cancel()
            run = self._run
            init_pid = bwrap_status(run.status.value(), "child-pid")
            kill_run(run.proc, run.pidfd, run.cgroup, init_pid)
            self._drainer.join(timeout=5)
            if reason in ("closed", "exit:0") and run.cgroup and run.cgroup.oom_killed():
                self._closed_reason = "memory"
            with contextlib.suppress(OSError):  # e.g. flushing a request into the pipe of a program already gone
                self._stack.close()

    def _exit_reason(self) -> str:
        """Why the program ended by itself: read from the cgroup and bwrap's status once it has exited."""
        run = self._run
        with contextlib.suppress(Exception):
            run.proc.wait(timeout=2)
        self._drainer.join(timeout=2)
        if run.cgroup and run.cgroup.oom_killed():
            return "memory"
        code = bwrap_status(run.status.value(), "exit-code")
        if code is None:
            return "exit:unknown"
        code, reason = signal_of(code)
        if code != 0 and run.cgroup and run.cgroup.pids_exhausted():
            return "pids"
        return reason or f"exit:{code}"

    def _closed_error(self) -> SessionClosedError:
        reason = self._closed_reason or "closed"
        tail = self._stderr.value()[-2000:].decode(errors="replace").strip()
        return SessionClosedError(f"the sandbox session ended ({reason})" + (f": {tail}" if tail else ""), reason)

    def _drain(self) -> None:
        """Keep reading stderr (a full pipe would block the program) and bwrap's status, until both close."""
        run = self._run
        sinks = {run.proc.stderr.fileno(): self._stderr}
        if run.status_r is not None:
            sinks[run.status_r] = run.status
        with selectors.DefaultSelector() as selector:
            for fd in sinks:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    try:
                        data = os.read(key.fd, 1 << 16)
                    except OSError:
                        data = b""
                    if data:
                        sinks[key.fd].add(data)
                    else:
                        selector.unregister(key.fd)

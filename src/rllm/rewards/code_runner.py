"""The trusted test runner that `rllm.rewards.code` copies, fresh, into the sandbox for every run.

A standalone script (standard library only, Python 3.8+, no rllm import), run in the sandbox's working directory. It
reads the job from stdin as two JSON lines, what the tests may see (program, inputs, limits) and what they must not
(the expected outputs and the host's verdict token), and writes exactly one JSON verdict to fd 3, the sandbox's
result channel; stdout, stderr and the exit code carry nothing the host reads.

Three kinds of process, and only the last runs solution code:
- The judge (the script's process) forks the worker FIRST, before it has read anything, then makes itself
  non-dumpable (a same-uid process can then neither ptrace it nor open /proc/<judge>/mem or /proc/<judge>/fd/3),
  reads the job from stdin (never a file the solution could open), keeps the second line in `_SECRETS` and hands the
  worker the first. It has the worker run one test at a time and decides pass/fail and when to stop itself. So no
  process a test is forked from ever held an expected output: a solution that scans its own memory (freed heap
  included, e.g. /proc/self/maps + ctypes.string_at) finds none. (When one process read the job and then forked
  the tests, such a scan passed 33 of 64 hidden tests of a task it knew nothing about.)
- The worker (non-dumpable too, so a test cannot reach its pipes to the judge through /proc) forks a child per test
  and gives the judge what the child left: its report line, its stdout and stderr, and how it ended. It waits for
  the report until the per-test deadline (wall clock; then it kills the child's process group).
- Each child FIRST closes fd 3 and every descriptor it must not hold, then sets per-test rlimits and runs the
  solution: stdin is an in-memory file holding the test input, stdout/stderr are in-memory files the worker reads
  afterwards, and the child reports over a private pipe, as one JSON line carrying a per-test random nonce.
- The judge's verdict per test: stdio, the child's stdout against the expected output (a report is still
  required, so a program that dies early, e.g. `os._exit(0)`, fails). call: the return value, which the child must
  serialise as plain JSON data (an object with a custom `__eq__` cannot be), against the expected value.
  humaneval: the trusted prompt and `check` run BEFORE the solution, with a pristine copy of the builtins; every
  value `candidate` returns is rebuilt from exact builtin types before an assert sees it; `check` returning is the
  child's claim that the test passed. A worker that stops answering (a solution may signal its parent) fails the
  test as a harness error and ends the run.
- One fresh fork per test, so one test's monkeypatching cannot reach the next; the judge and the worker hold
  everything in memory and never re-read a file, so what the solution writes to the working directory changes
  nothing.

Threat model: the solution is adversarial Python running as the child. stdio and call verdicts are computed by the
judge from data, so a forged report can only claim "finished", which gains nothing. What a test can see of the job
is its program, every test's input and the limits, never an expected output or the token. The humaneval
verdict is a claim made inside the solution's interpreter: a solution that manipulates the interpreter (reads the
nonce from stack frames or `gc` and forges the report, rewrites `check` found through `gc`, a trace function that
jumps over asserts, monkeypatching a module such as `math` that `check` uses, forking to try both answers to each
assert) can defeat it. The nonce and the plain-data wrapper stop the simple hacks, not a determined
interpreter-level attack; prefer stdio/call tests where that matters.
"""

from __future__ import annotations

import builtins
import gc
import io
import json
import linecache
import math
import os
import re
import resource
import select
import signal
import struct
import sys
import time
import traceback
import types

RUNNER_VERSION = "rllm-code-runner/1"
RESULT_FD = 3
_ERROR_TAIL = 1500  # characters of a traceback / stderr kept for feedback
_SECRETS: dict = {}  # the expected outputs and the verdict token: the judge's alone
_PRISTINE_BUILTINS = dict(builtins.__dict__)  # taken before any solution code exists
_WORKER_GRACE_S = 2.0  # how long after a test's deadline the judge waits for the worker's account of it


# ----------------------------------------------------------------------------------------------------- the judge


def main() -> None:
    started = time.monotonic()
    # The solution can write files in the script's directory; an import that found one would run its code here.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if p not in ("", ".", here)]
    try:
        import ctypes  # noqa: F401  (for _set_non_dumpable, in both processes)
    except ImportError:
        pass
    # The collector never walks the objects that exist now again: the worker and the tests, forked from here, then
    # do not copy the pages those live on (copy-on-write). That pays for the extra process.
    gc.freeze()
    worker = _Worker()  # before anything is read: its memory must never hold an expected output
    hardening = {"non_dumpable": _set_non_dumpable()}
    try:
        job, public = _load_job()
        _send(worker.command_w, {}, public)
    except Exception as exc:
        worker.stop()
        _write_verdict({"runner": RUNNER_VERSION, "error": f"could not load the job: {exc!r}", "tests": []})
        return
    tests, stopped = _run_all(job, started, worker)
    worker.stop()
    hardening["non_dumpable"] = hardening["non_dumpable"] and worker.non_dumpable
    verdict = {
        "runner": RUNNER_VERSION,
        "token": _SECRETS.get("token"),
        "tests": tests,
        "stopped": stopped,
        "total": len(job["inputs"]),
        "hardening": hardening,
    }
    _write_verdict(verdict)


def _load_job() -> tuple[dict, bytes]:
    """Read the job from stdin (never a file the solution could open): (the job, the bytes of its public line); the
    second line goes into `_SECRETS`."""
    public, secret = sys.stdin.buffer.read().split(b"\n", 1)
    _SECRETS.update(json.loads(secret))
    return json.loads(public), public


def _set_non_dumpable() -> bool:
    """PR_SET_DUMPABLE=0: /proc/<pid>/{mem,fd,environ} of this process become unreachable to same-uid processes,
    and so does ptrace. Children forked afterwards inherit it."""
    try:
        import ctypes  # imported by the judge before it forks the worker: once for both

        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0
    except Exception:
        return False


def _run_all(job: dict, started: float, worker: _Worker) -> tuple[list, str | None]:
    total_deadline = started + float(job["total_timeout_s"])
    results, stopped = [], None
    for index in range(len(job["inputs"])):
        if time.monotonic() >= total_deadline:
            stopped = "total_timeout"
            break
        result = _run_one(job, index, total_deadline, worker)
        results.append(result)
        if result.pop("worker_lost", False):
            stopped = "worker_lost"
            break
        if result["status"] == "syntax_error":
            stopped = "syntax_error"  # every other test would fail the same way
            break
        if not result["passed"] and job.get("stop_at_first_failure", True):
            stopped = "first_failure"
            break
    return results, stopped


def _run_one(job: dict, index: int, total_deadline: float, worker: _Worker) -> dict:
    """Have the worker run test `index`, then judge what it saw here, where the expected output is."""
    limit = int(job["output_limit_bytes"])
    deadline = min(time.monotonic() + float(job["per_test_timeout_s"]), total_deadline) + _WORKER_GRACE_S
    frame = worker.run(index, total_deadline, deadline, 3 * limit + (1 << 20))
    if frame is None:  # killed or stopped by the solution (same uid: it may signal its parent)
        return {"index": index, "worker_lost": True, **_fail("harness_error", "the test worker stopped answering")}
    seen, (line, stdout, stderr) = frame
    if "harness_error" in seen:
        return {"index": index, **_fail("harness_error", seen["harness_error"])}
    result = {"index": index, "duration_s": seen["duration_s"]}
    line = line if seen["reported"] else None
    try:
        result.update(_judge(job, index, seen["nonce"], line, seen["outcome"], seen["status"], stdout, stderr, limit))
        if seen["outcome"] == "timeout" and seen["cut_by_total"]:
            result["error"] = f"stopped by the total time limit of {job['total_timeout_s']} s for all tests"
    except Exception as exc:
        result.update(passed=False, status="bad_report", error=f"the test's report could not be judged: {exc!r}")
    return result


class _Worker:
    """The judge's handle on the worker: its pid and the judge's ends of the command and results pipes."""

    def __init__(self) -> None:
        command_r, self.command_w = os.pipe()
        self.results_r, results_w = os.pipe()
        self.non_dumpable = True  # while every answer says so (no answer: no test ran, nothing to protect)
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the worker never returns
            os.close(self.command_w)
            os.close(self.results_r)
            _worker(command_r, results_w)
        os.close(command_r)
        os.close(results_w)

    def run(self, index: int, total_deadline: float, deadline: float, cap: int) -> tuple[dict, list] | None:
        """What test `index` left, or None when the worker does not answer by `deadline`."""
        try:
            _send(self.command_w, {"index": index, "total_deadline": total_deadline})
            frame = _recv(self.results_r, deadline, cap)
        except (OSError, ValueError):  # a broken pipe (the worker is dead), a garbled frame
            return None
        if frame is not None:
            self.non_dumpable = self.non_dumpable and frame[0].pop("non_dumpable", None) is True
        return frame

    def stop(self) -> None:
        os.close(self.command_w)
        os.close(self.results_r)
        try:
            os.kill(self.pid, signal.SIGKILL)  # idle (or stopped by the solution): nothing of its is needed any more
            os.waitpid(self.pid, 0)
        except OSError:
            pass


# Between the judge and the worker: frames of two 4-byte lengths (a JSON header's, then the blobs'), the header (it
# lists the blobs' sizes) and the raw blobs, written at once and read in two reads where they fit in the pipe.


def _send(fd: int, header: dict, *blobs: bytes) -> None:
    head = json.dumps({**header, "sizes": [len(b) for b in blobs]}).encode("utf-8")
    view = memoryview(b"".join((struct.pack(">II", len(head), sum(map(len, blobs))), head, *blobs)))
    while view:
        view = view[os.write(fd, view) :]


def _recv(fd: int, deadline: float | None = None, cap: int = 1 << 62) -> tuple[dict, list] | None:
    """The next frame, or None at the end of the pipe, at the deadline, or for one larger than `cap`."""
    sizes = _read_exact(fd, 8, deadline)
    if sizes is None or sum(struct.unpack(">II", sizes)) > cap:
        return None
    head_size, blobs_size = struct.unpack(">II", sizes)
    body = _read_exact(fd, head_size + blobs_size, deadline)
    header = json.loads(body[:head_size]) if body is not None else None
    if not isinstance(header, dict) or sum(header.get("sizes", [])) != blobs_size:
        return None
    blobs, at = [], head_size
    for size in header.pop("sizes"):
        blobs.append(body[at : at + size])
        at += size
    return header, blobs


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            return None
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


# ---------------------------------------------------------------------------------------------------- the worker


def _worker(command_r: int, results_w: int) -> None:  # pragma: no cover - runs in the forked worker
    """Run the tests the judge asks for, one at a time, and send back what each left; never returns. The result
    channel and the job's stdin are the judge's: /dev/null takes their place (so no pipe made here lands on fd 3)."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, RESULT_FD)
        os.close(null)
        non_dumpable = _set_non_dumpable()
        job = json.loads(_recv(command_r)[1][0])
        gc.freeze()  # the job's objects too (see main)
        while (command := _recv(command_r)) is not None:
            try:
                seen, blobs = _run_test(job, command[0]["index"], command[0]["total_deadline"])
            except OSError as exc:  # e.g. fork() refused: processes the solution left behind hold every pid
                seen, blobs = {"harness_error": f"cannot run the test: {exc}"}, [b"", b"", b""]
            _send(results_w, {**seen, "non_dumpable": non_dumpable}, *blobs)
    finally:
        os._exit(0)


def _run_test(job: dict, index: int, total_deadline: float) -> tuple[dict, list]:
    """Fork one child for test `index`; what it left: ({nonce, outcome, wait status, ...}, [report line, stdout,
    stderr]). Judging is the judge's."""
    nonce = os.urandom(16).hex()
    limit = int(job["output_limit_bytes"])
    report_r, report_w = os.pipe()
    out_fd, err_fd = _anon_file("stdout"), _anon_file("stderr")
    start = time.monotonic()
    per_test_deadline = start + float(job["per_test_timeout_s"])
    deadline = min(per_test_deadline, total_deadline)
    try:
        pid = os.fork()
    except OSError:
        for fd in (report_r, report_w, out_fd, err_fd):
            os.close(fd)
        raise
    if pid == 0:  # pragma: no cover - the child never returns
        _child(job, index, nonce, report_w, out_fd, err_fd)
    os.close(report_w)
    try:
        os.setpgid(pid, pid)  # also done in the child; whichever runs first wins the race
    except OSError:
        pass
    line, outcome, status = _read_report(report_r, pid, deadline, limit + 4096)
    _kill_group(pid, reaped=status is not None)
    if status is None:
        status = os.waitpid(pid, 0)[1]
    _reap_orphans()
    os.close(report_r)
    stdout, stderr = _read_anon(out_fd, limit), _read_anon(err_fd, limit)
    seen = {
        "nonce": nonce,
        "outcome": outcome,
        "status": status,
        "reported": line is not None,
        "duration_s": round(time.monotonic() - start, 4),
        "cut_by_total": deadline < per_test_deadline,
    }
    return seen, [line or b"", stdout, stderr]


def _anon_file(name: str) -> int:
    """An in-memory file the child writes and the parent reads after the test: no size-limited pipe to drain."""
    return os.memfd_create(name)


def _read_report(fd: int, pid: int, deadline: float, cap: int) -> tuple[bytes | None, str, int | None]:
    """(the child's report line or None, what happened: "report", "died", "timeout" or "overflow", the child's wait
    status when it was reaped here). A child that exits is noticed within 50 ms even when a grandchild it left
    behind keeps the pipe open; one that closes the pipe without a report is given until the deadline to exit."""
    buf, eof = b"", False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, "timeout", None
        if eof:
            time.sleep(min(remaining, 0.01))
        elif select.select([fd], [], [], min(remaining, 0.05))[0]:
            chunk = os.read(fd, 65536)
            buf, eof = buf + chunk, not chunk
            if b"\n" in buf:
                return _first_line(buf), "report", None
            if len(buf) > cap:
                return None, "overflow", None
            continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            buf += _drain(fd, cap)
            line = _first_line(buf)
            return line, "report" if line is not None else "died", status


def _drain(fd: int, cap: int) -> bytes:
    os.set_blocking(fd, False)
    data = b""
    try:
        while len(data) <= cap:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    return data


def _first_line(buf: bytes) -> bytes | None:
    return buf.split(b"\n", 1)[0] if b"\n" in buf else None


def _kill_group(pid: int, *, reaped: bool) -> None:
    """Kill whatever the test left running (the child and its process group); a reaped pid may be reused."""
    for target in (-pid,) if reaped else (-pid, pid):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass


def _reap_orphans() -> None:
    """Collect killed grandchildren reparented to us (when the runner is PID 1 of the sandbox's pid namespace)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _read_anon(fd: int, limit: int) -> bytes:
    """At most `limit + 1` bytes of an in-memory file (one more than allowed tells the caller it overflowed)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _judge(job, index, nonce, line, outcome, status, stdout, stderr, limit) -> dict:
    if outcome == "timeout":
        return _fail("timeout", f"timed out after {job['per_test_timeout_s']} s (wall clock)", stderr)
    if len(stdout) > limit or len(stderr) > limit or _signal_of(status) == signal.SIGXFSZ:
        return _fail("output_limit", f"wrote more than {limit} bytes of output")
    if outcome == "overflow":
        return _fail("output_limit", f"returned a value whose JSON is longer than {limit} bytes")
    if line is None:
        return _fail(*_death(status, stderr))
    report = json.loads(line.decode("utf-8"))
    if not isinstance(report, dict) or report.get("nonce") != nonce:
        return _fail("bad_report", "the test's report did not carry the runner's nonce")
    kind = report.get("status")
    if kind != "ok":
        error = str(report.get("error", ""))[-_ERROR_TAIL:]
        return _fail(kind if kind in _CHILD_FAILURES else "bad_report", error, stderr)
    fmt = job["format"]
    if fmt == "humaneval":
        return {"passed": True, "status": "passed"}
    expected = _SECRETS["expected"][index]
    if fmt == "stdio":
        got = stdout.decode("utf-8", errors="replace")
        ok = stdio_equal(got, expected, job.get("float_tol"))
    else:
        got = report.get("value")
        ok = values_equal(got, expected, job.get("float_tol")) or (
            bool(job.get("unwrap_single"))
            and isinstance(expected, list)
            and len(expected) == 1
            and values_equal(got, expected[0], job.get("float_tol"))
        )
        got = json.dumps(got)
    if ok:
        return {"passed": True, "status": "passed"}
    return {
        "passed": False,
        "status": "wrong_answer",
        "got": got[: int(job.get("excerpt_chars", 300))],
        "stderr": _tail(stderr),
    }


_CHILD_FAILURES = ("runtime_error", "syntax_error", "unserializable", "missing_function", "harness_error")
_CHILD_FAILURES += ("wrong_answer",)  # a failed assert of HumanEval's check


def _fail(status: str, error: str, stderr: bytes = b"") -> dict:
    out = {"passed": False, "status": status, "error": error}
    if stderr:
        out["stderr"] = _tail(stderr)
    return out


def _tail(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")[-_ERROR_TAIL:]


def _signal_of(status: int | None) -> int | None:
    return os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None


def _death(status: int | None, stderr: bytes) -> tuple[str, str, bytes]:
    """Why a child ended without a report: a program must finish normally (return, or sys.exit(0)) to pass."""
    sig = _signal_of(status)
    if sig == signal.SIGXCPU:
        return "timeout", "exceeded its CPU time limit", stderr
    if sig == signal.SIGKILL:
        return "killed", "was killed (SIGKILL; most likely out of memory)", stderr
    if sig is not None:
        return "runtime_error", f"crashed with {signal.Signals(sig).name}", stderr
    code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else "unknown"
    return "no_report", f"exited (code {code}) before finishing the test, e.g. through os._exit", stderr


def _write_verdict(verdict: dict) -> None:
    data = json.dumps(verdict).encode("utf-8")
    while data:
        data = data[os.write(RESULT_FD, data) :]
    os.close(RESULT_FD)


# ------------------------------------------------------------------------------------------------------- comparison


def normalise_output(text: str) -> str:
    """Trailing spaces of each line and trailing blank lines do not count ("\\r\\n" reads as "\\n")."""
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def stdio_equal(got: str, expected: str, float_tol: float | None) -> bool:
    """Exact after `normalise_output`; else, with `float_tol`, token by token as Codeforces' checkers do: the
    whitespace-separated tokens must match one for one, where two numbers with a '.' or an exponent (in either)
    match within `float_tol` absolute or relative error. Two integer tokens must match exactly (a big integer
    answer must not pass by rounding)."""
    if normalise_output(got) == normalise_output(expected):
        return True
    if float_tol is None:
        return False
    a, b = got.split(), expected.split()
    return len(a) == len(b) and all(x == y or _close_tokens(x, y, float_tol) for x, y in zip(a, b, strict=True))


def _close_tokens(x: str, y: str, tol: float) -> bool:
    if not (_is_number(x) and _is_number(y)) or not (_is_real(x) or _is_real(y)):
        return False
    fx, fy = float(x), float(y)
    return math.isfinite(fx) and math.isfinite(fy) and abs(fx - fy) <= tol * max(1.0, abs(fy))


_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _is_number(token: str) -> bool:
    return _NUMBER.fullmatch(token) is not None


def _is_real(token: str) -> bool:
    return "." in token or "e" in token or "E" in token


def values_equal(got, expected, float_tol: float | None) -> bool:
    """Structural equality of JSON values; a float on either side matches within `float_tol` (abs or relative)."""
    if isinstance(got, float) or isinstance(expected, float):
        if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
            if float_tol is None or isinstance(got, bool) != isinstance(expected, bool):
                return got == expected
            return got == expected or math.isclose(got, expected, rel_tol=float_tol, abs_tol=float_tol)
        return False
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(
            values_equal(g, e, float_tol) for g, e in zip(got, expected, strict=True)
        )
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(values_equal(got[k], expected[k], float_tol) for k in got)
    return type(got) in (int, bool, str, type(None)) and got == expected


# ----------------------------------------------------------------------------------------------------- child side


def _child(job, index, nonce, report_w, out_fd, err_fd) -> None:  # pragma: no cover - runs in the forked child
    """Never returns (whatever is raised, even while reporting, ends in os._exit: the child must never run on into
    the worker's code). Order matters: drop every descriptor of the worker's before any solution code exists."""
    try:
        try:
            os.close(RESULT_FD)  # /dev/null in the worker: closed, a write to fd 3 fails as before
            _keep_only_fds(report_w, out_fd, err_fd)
            os.setpgid(0, 0)
            report = _child_run(job, index)
        except BaseException:
            report = {"status": "harness_error", "error": "the test harness failed in the child"}
        report["nonce"] = nonce
        try:
            data = (json.dumps(report) + "\n").encode("utf-8")
        except BaseException:
            data = json.dumps({"status": "unserializable", "error": "unencodable report", "nonce": nonce}) + "\n"
            data = data.encode()
        while data:
            data = data[os.write(report_w, data) :]
    finally:
        os._exit(0)


def _keep_only_fds(report_w: int, out_fd: int, err_fd: int) -> None:
    """Redirect stdio to the in-memory files, then close every inherited descriptor except the report pipe."""
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    keep = sorted({0, 1, 2, report_w})
    low = 3
    for fd in keep:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, max(os.sysconf("SC_OPEN_MAX"), 1024))


def _child_run(job: dict, index: int) -> dict:
    fmt = job["format"]
    test_input = job["inputs"][index] if fmt == "stdio" else ""
    _set_stdin(test_input)
    _set_limits(job)
    sys.stdout = sys.__stdout__ = _STDOUT[0] = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.argv = ["solution.py"]
    if fmt == "humaneval":
        test_ns = _load_harness(job)  # trusted code first: before the solution can patch anything
        if isinstance(test_ns, dict) and "status" in test_ns:
            return test_ns
    code = _compile(job["code"], "<solution>")
    if isinstance(code, dict):
        return code
    namespace = _module_namespace("__main__" if fmt == "stdio" else "__solution__")
    try:
        if fmt == "call" and job.get("prelude"):
            exec(job["prelude"], namespace)
        exec(code, namespace)
        if fmt == "stdio":
            return _finish_stdio()
        if fmt == "call":
            return _call_test(job, index, namespace)
        return _humaneval_test(job, namespace, test_ns)
    except SystemExit as exc:
        if fmt == "stdio" and exc.code in (None, 0):
            return _finish_stdio()
        return {"status": "runtime_error", "error": f"SystemExit: {exc.code!r} (the program exited with an error)"}
    except NotPlainError as exc:
        return {"status": "unserializable", "error": str(exc)}
    except BaseException as exc:
        return _runtime_error(exc)


_STDOUT = [None]  # the child's own stdout wrapper, flushed at the end even if the solution rebinds sys.stdout


def _module_namespace(name: str) -> dict:
    """A real module in sys.modules (replacing the runner as `__main__` in this child): `import __main__`, pickle
    and dataclasses (which look classes' modules up there) see the solution's module."""
    module = types.ModuleType(name)
    module.__builtins__ = builtins
    sys.modules[name] = module
    return module.__dict__


class NotPlainError(TypeError):
    """A return value that is not plain data (e.g. an object whose __eq__ always says True)."""


def _set_stdin(text: str) -> None:
    fd = _anon_file("stdin")
    data = text.encode("utf-8")
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")


def _set_limits(job: dict) -> None:
    """Per-test CPU time (a backstop: the parent kills on wall-clock time), output size, no core files; never above
    the hard limits the sandbox already set. The output limit lets one byte more through than allowed, so the
    parent sees the overflow (Python ignores SIGXFSZ: the write past it is silently short or fails with EFBIG)."""
    cpu = math.ceil(float(job["per_test_timeout_s"])) + 1
    _lower(resource.RLIMIT_CPU, cpu, cpu + 1)
    limit = int(job["output_limit_bytes"]) + 1
    _lower(resource.RLIMIT_FSIZE, limit, limit)
    _lower(resource.RLIMIT_CORE, 0, 0)


def _lower(which: int, soft: int, hard: int) -> None:
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY:
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(which, (soft, hard))


def _compile(source: str, filename: str):
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        return compile(source, filename, "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return {"status": "syntax_error", "error": text}


def _runtime_error(exc: BaseException) -> dict:
    """The traceback without the runner's own frames: the feedback is about the solution. A failed assert of the
    test itself (the innermost frame is in <test>) is a wrong answer, not a crash."""
    tb = traceback.TracebackException.from_exception(exc)
    tb.stack = traceback.StackSummary.from_list([f for f in tb.stack if f.filename != __file__])
    wrong = isinstance(exc, AssertionError) and bool(tb.stack) and tb.stack[-1].filename == "<test>"
    return {"status": "wrong_answer" if wrong else "runtime_error", "error": "".join(tb.format())[-_ERROR_TAIL:]}


def _finish_stdio() -> dict:
    for stream in {id(s): s for s in (_STDOUT[0], sys.stdout, sys.__stdout__)}.values():
        stream.flush()
    return {"status": "ok"}


def _call_test(job: dict, index: int, namespace: dict) -> dict:
    name = job["fn_name"]
    fn = namespace.get(name)
    if not callable(fn):
        cls = namespace.get("Solution")
        if isinstance(cls, type) and callable(getattr(cls, name, None)):
            fn = getattr(cls(), name)  # LeetCode style: a fresh instance per test
        else:
            return {"status": "missing_function", "error": f"the code defines no function {name} (nor Solution.{name})"}
    value = fn(*job["inputs"][index])
    try:
        return {"status": "ok", "value": to_json_data(value)}
    except (TypeError, ValueError, RecursionError) as exc:
        return {
            "status": "unserializable",
            "error": f"the function {exc}"
            if isinstance(exc, NotPlainError)
            else f"the return value is not JSON data: {exc}",
        }


def to_json_data(value):
    """`to_plain`, then the JSON shape: tuples become lists; sets, bytes, complex and tuple keys are refused."""
    return _json_shape(to_plain(value))


def _json_shape(plain):
    if isinstance(plain, (list, tuple)):
        return [_json_shape(v) for v in plain]
    if isinstance(plain, dict):
        if not all(k is None or type(k) in (str, int, float, bool) for k in plain):
            raise TypeError("a dict with keys that are not strings or numbers is not JSON data")
        return {k: _json_shape(v) for k, v in plain.items()}
    if isinstance(plain, (set, frozenset, bytes, complex)):
        raise TypeError(f"a {type(plain).__name__} is not JSON data")
    return plain


def to_plain(value, depth: int = 0):
    """A copy made only of exact builtin types (container types kept), or TypeError. numpy values are accepted
    through `.tolist()`, whose result is converted in turn (so what it returns cannot smuggle in an object)."""
    if depth > 200:
        raise ValueError("nested more than 200 levels")
    if value is None or value is True or value is False:
        return value
    for base, copy in _SCALARS:
        if isinstance(value, base):
            return copy(value)
    for base, rebuild in _CONTAINERS:
        if isinstance(value, base):
            return rebuild(value, depth + 1)
    module = getattr(type(value), "__module__", "") or ""
    if module.split(".")[0] == "numpy" and hasattr(value, "tolist"):
        return to_plain(value.tolist(), depth + 1)
    raise NotPlainError(
        f"returned an object of type {type(value).__name__}, not a plain value (int, float, str, list, dict, ...)"
    )


_SCALARS = (  # the base types' own slots return exact copies, whatever a subclass overrides
    (int, int.__int__),
    (float, float.__float__),
    (str, str.__str__),
    (bytes, lambda b: bytes.__getitem__(b, slice(None))),
    (complex, lambda c: complex(complex.real.__get__(c), complex.imag.__get__(c))),
)
_CONTAINERS = (
    (list, lambda v, d: [to_plain(x, d) for x in list.__iter__(v)]),
    (tuple, lambda v, d: tuple(to_plain(x, d) for x in tuple.__iter__(v))),
    (dict, lambda v, d: {to_plain(k, d): to_plain(x, d) for k, x in dict.items(v)}),
    (frozenset, lambda v, d: frozenset(to_plain(x, d) for x in frozenset.__iter__(v))),
    (set, lambda v, d: {to_plain(x, d) for x in set.__iter__(v)}),
)


def _load_harness(job: dict):
    """Run the trusted prompt (helpers such as HumanEval/32's `poly`) and test code with pristine builtins."""
    test_ns = {"__name__": "__test__", "__builtins__": dict(_PRISTINE_BUILTINS)}
    for source, filename in ((job.get("prompt") or "", "<prompt>"), (job["test"], "<test>")):
        code = _compile(source, filename)
        if isinstance(code, dict):
            return {"status": "harness_error", "error": f"{filename} does not compile: {code['error']}"}
        try:
            exec(code, test_ns)
        except BaseException as exc:
            return {"status": "harness_error", "error": f"{filename} raised {exc!r}"}
    return test_ns


def _humaneval_test(job: dict, namespace: dict, test_ns: dict) -> dict:
    fn = namespace.get(job["entry_point"])
    if not callable(fn):
        return {"status": "missing_function", "error": f"the code defines no function {job['entry_point']}"}

    def candidate(*args, **kwargs):
        return to_plain(fn(*args, **kwargs))

    candidate.__name__ = job["entry_point"]
    test_ns[job["entry_point"]] = candidate  # some tests call it by name (HumanEval/33), not only as `candidate`
    test_ns["check"](candidate)
    return {"status": "ok"}


if __name__ == "__main__":
    main()

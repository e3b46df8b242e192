"""A fork server for the suite's `rllm` command lines (`tests.support.cli.run_rllm`): a CLI run in a subprocess spent
about 4 of its 6 CPU seconds importing torch, transformers and rllm, so this process imports them once (running no
torch op, so no thread pool exists to be broken by fork) and forks one child per command line.

    python tests/cli_forkserver.py      one JSON request a line in, one JSON reply a line out

A request: {"argv": [...], "cwd": dir, "env": {...}, "stdout": file, "stderr": file, "timeout_s": seconds}; the reply:
{"returncode": int} (a child killed by a signal: minus its number) or {"timed_out": true} (the child was killed).
The child is what `python -m rllm.cli.main ARGV` run in `cwd` with `env` would be: its own process, `cwd` first on
sys.path, stdin from /dev/null, stdout and stderr to the files, `rllm.cli.main.main(argv)`'s code as its exit
status, its atexit handlers run. What it cannot be: a process whose environment differs from this one's where a
module reads it at import, so run_rllm uses a real subprocess whenever its environment is not the one this server
started in (but for variables read only when used: `CALL_TIME_VARIABLES` in tests/support/cli.py).
All children share this server's string hash seed.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import time
import traceback


def preload() -> None:
    """What a command line imports, imported before forking; no torch op runs here."""
    import peft  # noqa: F401
    import transformers  # noqa: F401

    import rllm.cli.main
    import rllm.evaluation
    import rllm.training.backends.torch
    import rllm.training.trainer  # noqa: F401


def child(request: dict) -> None:
    """Runs in the forked child: never returns."""
    rc = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = os.getcwd()  # as `python -m` puts it
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, key in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(request[key], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.argv = [sys.executable, *request["argv"]]
        from rllm.cli.main import main

        try:
            rc = main(request["argv"])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            rc = 1
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def run(request: dict) -> dict:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(request)
    deadline = time.monotonic() + request.get("timeout_s", 600)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timed_out": True}
        time.sleep(0.02)


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w")  # replies only: anything else printed goes to stderr
    os.dup2(2, 1)
    preload()
    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        if line.strip():
            protocol.write(json.dumps(run(json.loads(line))) + "\n")
            protocol.flush()


if __name__ == "__main__":
    main()

"""The `rllm` command line as tests run it: forked from a per-process fork server (tests/cli_forkserver.py) while
the environment is the suite's own, as tests/conftest.py left it (`remember_suite_environment`)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).parents[1]

# Variables set in the test process that no module reads at import, which the forked child is given as they are:
# pytest's name of the running test, and the cache folder torch's compiler sets for itself at its first use.
CALL_TIME_VARIABLES = {"PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR"}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CALL_TIME_VARIABLES}


# The environment the fork server starts in: tests/conftest.py's, as it set it at its import, before any test
# changed it. Empty until conftest remembers it.
SUITE_ENVIRONMENT: dict[str, str] = {}


def remember_suite_environment() -> None:
    """Called once by tests/conftest.py, after it set the suite's variables: the environment run_rllm forks in."""
    SUITE_ENVIRONMENT.clear()
    SUITE_ENVIRONMENT.update(_environment())


def run_rllm(*args: str, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """The `rllm` command line in a process of its own, as a user types it; the caller checks `returncode`. Forked
    from this test process's CLI fork server (tests/cli_forkserver.py: torch and rllm imported once) while the
    environment is the suite's own, else `python -m rllm.cli.main` in a subprocess (a test that set a variable)."""
    if not SUITE_ENVIRONMENT:
        raise RuntimeError("run_rllm runs under pytest only: tests/conftest.py calls remember_suite_environment()")
    command = [sys.executable, "-m", "rllm.cli.main", *args]
    if _environment() != SUITE_ENVIRONMENT:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    return _cli_server().run(command, list(args), cwd or os.getcwd(), timeout)


class CliForkServer:
    """This test process's tests/cli_forkserver.py (started at its first use, stopped at exit)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(TESTS / "cli_forkserver.py")],
            cwd=TESTS.parent,
            env=SUITE_ENVIRONMENT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reply()  # ready: everything imported
        self.outputs = Path(tempfile.mkdtemp(prefix="rllm-cli-"))
        self.runs = 0
        atexit.register(self.close)

    def run(self, command: list[str], argv: list[str], cwd, timeout: float) -> subprocess.CompletedProcess:
        self.runs += 1
        stdout, stderr = self.outputs / f"{self.runs}.out", self.outputs / f"{self.runs}.err"
        request = {"argv": argv, "cwd": str(cwd), "env": dict(os.environ), "timeout_s": timeout}
        request |= {"stdout": str(stdout), "stderr": str(stderr)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = self._reply()
        out, err = (path.read_text(encoding="utf-8", errors="replace") for path in (stdout, stderr))
        stdout.unlink()
        stderr.unlink()
        if reply.get("timed_out"):
            raise subprocess.TimeoutExpired(command, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(command, reply["returncode"], out, err)

    def _reply(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"tests/cli_forkserver.py died (exit {self.process.poll()}); its stderr is above")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        shutil.rmtree(self.outputs, ignore_errors=True)


_CLI_SERVER: CliForkServer | None = None


def _cli_server() -> CliForkServer:
    global _CLI_SERVER
    if _CLI_SERVER is None or _CLI_SERVER.process.poll() is not None:
        _CLI_SERVER = CliForkServer()
    return _CLI_SERVER


def rllm_run(command: str, *args: str, run_root, name: str, cwd=None) -> tuple[subprocess.CompletedProcess, Path]:
    """`rllm command *args` writing the run `name` under `run_root`, without the progress bar; it must succeed.
    Its output and its run folder."""
    run_args = [f"trainer.run_dir={run_root}", f"trainer.name={name}", "--no-progress"]
    out = run_rllm(command, *args, *run_args, cwd=cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    return out, Path(run_root) / name

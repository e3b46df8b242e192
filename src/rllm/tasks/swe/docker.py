"""Docker mode for SWE tasks whose repository needs its own image (SWE-bench, SWE-Gym, R2E-Gym's SWE-bench sets;
rows from rllm.tasks.swe.swebench): `SWEEnv(task, backend="docker")`.

Needs the `docker` CLI and a reachable engine (`docker info` must answer; a remote DOCKER_HOST does not work: the
server's files are bind-mounted from this machine), and for grading `pip install swebench` (optional, not a
dependency of rllm: it pulls docker, datasets and modal).

- `DockerSession(image, ...)`: the episode's workspace, spoken to like rllm.sandbox.SandboxSession
  (`request`, `close`, `alive`): `docker run -i --rm --init --network none` with memory and pids limits, the
  workspace server (workspace_server.py, standard library only) bind-mounted read-only at /rllm and run by the
  image's first Python >= 3.7, on /testbed with `RLLM_SWE_BASE=git` (the image's /testbed is a git checkout at
  base_commit: the submission is `git add -A; git diff --cached HEAD`). The agent's commands get the image's test
  environment first on PATH (SWE-bench's conda env `testbed`). `close()` removes the container (`docker rm -f`),
  and so does the end of our process (the server exits when its stdin closes) or the episode's wall clock.
- `grade_in_docker(task, diff)`: the anti-hack policy first (grading.check_submission), then a FRESH container of the
  image: the diff applied as SWE-bench's harness does (`git apply`, then `--3way`, then `patch --fuzz=5`), every
  protected file put back as the image's tree had it (`rllm_swe_harness.is_protected`: tests, conftest.py, pytest's
  configuration, start-up files, bytecode; snapshotted before the diff, so a hack the policy missed gains nothing, and
  the grade fails closed when that cannot be done), then swebench's eval script for the task (it applies the
  test_patch and runs the test command), the log read by swebench's own parsers, and the reward by grading.verdict: 1
  only if every FAIL_TO_PASS and PASS_TO_PASS test passed. Unlike SWE-bench's harness the grader has no network by
  default (`network="none"`): a repository whose eval script reinstalls itself keeps the install its image was built
  with.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from rllm.errors import InfraError, RllmError
from rllm.sandbox import CappedBuffer, SandboxSession
from rllm.tasks.swe.grading import GradeResult, TestRun, check_submission, verdict
from rllm.tasks.swe.rllm_swe_harness import RESTORED_MARKER
from rllm.tasks.swe.swebench import docker_image, eval_spec

__all__ = [
    "DockerError",
    "DockerSession",
    "DockerUnavailableError",
    "docker_available",
    "grade_in_docker",
    "open_session",
]

_HERE = Path(__file__).parent
_MAX_LOG = 64 << 20
_APPLIED, _NOT_APPLIED = ">>>>> rllm: submission applied", ">>>>> rllm: submission does not apply"
# The image's first Python >= 3.7 runs the server (SWE-bench images: conda's python3 first on PATH, then the
# system's); the agent's commands see the task's environment first on PATH (SWE-bench's conda env, R2E-Gym's venv).
_FIND_PYTHON = r"""
py=""
for candidate in python3 /usr/bin/python3 /opt/miniconda3/bin/python3 /usr/local/bin/python3 python; do
  if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 7))' 2>/dev/null; then py=$candidate; break; fi
done
"""
_LAUNCHER = (
    r"""
export RLLM_SWE_PATH_PREFIX="${PATH%%:*}"  # never empty: an empty PATH entry would mean the current directory
for dir in /opt/miniconda3/envs/testbed/bin /root/.venv/bin; do
  if [ -d "$dir" ]; then export RLLM_SWE_PATH_PREFIX="$dir"; break; fi
done
"""
    + _FIND_PYTHON
    + r"""
if [ -n "$py" ]; then exec "$py" -s -B /rllm/rllm_swe_server.py; fi
echo "rllm: the image has no python3 >= 3.7 to run the workspace server" >&2
exit 127
"""
)
_UNPROTECTED = ">>>>> rllm: the protected files could not be snapshotted or restored"
# The snapshot is taken before the diff, the restore runs after it, from / and with -I (no current directory, no
# user site, no PYTHON* variables), so nothing the diff wrote into the repository can stand in for the harness.
_GRADE_SCRIPT = f"""#!/bin/bash
# rllm: apply the submission as SWE-bench's harness does, put every protected file back as the pristine tree has it
# (rllm_swe_harness.is_protected: test files, conftest.py, pytest's configuration, start-up files, bytecode), then
# run the task's eval script
here=$(cd "$(dirname "$0")" && pwd)
repo=$PWD
{_FIND_PYTHON}
protect() {{ (cd / && "$py" -I -B "$here/rllm_swe_harness.py" "$@" --root "$repo"); }}
if [ -z "$py" ] || ! protect --snapshot /tmp/rllm-pristine; then
  echo "{_UNPROTECTED}"
  exit 1
fi
for apply in "git apply --verbose" "git apply --verbose --3way" "patch --batch --forward --fuzz=5 -p1 -i"; do
  if $apply "$here/submission.diff"; then
    echo "{_APPLIED}"
    protect --restore /tmp/rllm-pristine || {{ echo "{_UNPROTECTED}"; exit 1; }}
    exec bash "$here/eval.sh"
  fi
  git checkout -- . ; git clean -fdq  # a failed attempt may leave part of the patch behind
done
echo "{_NOT_APPLIED}"
"""


class DockerUnavailableError(RllmError):
    """No Docker engine can be used from here; the message says why and what to do."""


class DockerError(InfraError):
    """A docker command failed (an image that cannot be pulled, an engine error): retried as an infra error."""


# ---- the docker CLI ---------------------------------------------------------------------------------------------


def docker_available() -> str | None:
    """None when `docker info` answers; otherwise why Docker cannot be used, with the fix."""
    cli = shutil.which("docker")
    if cli is None:
        return "the docker CLI is not installed: install Docker (https://docs.docker.com/engine/install/)"
    try:
        done = subprocess.run(
            [cli, "info", "--format", "{{.ServerVersion}}"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no Docker engine is reachable (docker info: {e}): start dockerd or set DOCKER_HOST"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        why = lines[-1] if lines else f"exit code {done.returncode}"
        return f"no Docker engine is reachable (docker info: {why}): start dockerd or set DOCKER_HOST"
    return None


def _docker() -> str:
    if (why := docker_available()) is not None:
        raise DockerUnavailableError(f"backend='docker' cannot run: {why}")
    return shutil.which("docker")


def _run(argv: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise DockerError(f"{what} took more than {timeout_s:g} s") from None
    if done.returncode != 0:
        raise DockerError(f"{what} failed: {(done.stderr or done.stdout).strip()[-1500:]}")
    return done


def ensure_image(image: str, *, timeout_s: float = 3600.0) -> None:
    """Pull the image unless the engine has it (a first pull of a SWE-bench image takes minutes)."""
    cli = _docker()
    inspect = [cli, "image", "inspect", image]
    if subprocess.run(inspect, check=False, capture_output=True, stdin=subprocess.DEVNULL).returncode:
        _run(
            [cli, "pull", image],
            timeout_s,
            f"docker pull {image} (SWE-Gym rows: load_swe_rows(images='swegym'); or build the image with swebench)",
        )


def _remove(cli: str, name: str) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([cli, "rm", "-f", name], check=False, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


def _limits(memory_mb: int, pids: int, network: str) -> list[str]:
    return [
        "--network",
        network,
        "--memory",
        f"{memory_mb}m",
        "--memory-swap",
        f"{memory_mb}m",
        "--pids-limit",
        str(pids),
    ]


def _file_dir(files: dict[str, str]) -> str:
    """A directory holding `files`, readable by any user (the image's user may not be root)."""
    directory = tempfile.mkdtemp(prefix="rllm-docker-")
    os.chmod(directory, 0o755)
    for name, text in files.items():
        (Path(directory) / name).write_text(text)
        os.chmod(Path(directory) / name, 0o644)
    return directory


# ---- the episode's workspace ------------------------------------------------------------------------------------


class DockerSession(SandboxSession):
    """One container running the workspace server for one episode (see the module docstring). It speaks exactly as
    a SandboxSession (whose request/reply code it reuses: `request`, `alive`, `close`, `stderr`); only how the
    program starts and ends differs. Not thread-safe: one request at a time."""

    def __init__(
        self, image: str, *, wall_s: float = 1800.0, memory_mb: int = 2048, pids: int = 512, network: str = "none"
    ) -> None:
        self.cli, self.image, self.name = _docker(), image, f"rllm-swe-{secrets.token_hex(6)}"
        self._dir = _file_dir(
            {
                "rllm_swe_server.py": (_HERE / "workspace_server.py").read_text(),
                "rllm_swe_patches.py": (_HERE / "patches.py").read_text(),
            }
        )
        self.argv = [
            self.cli,
            "run",
            "-i",
            "--rm",
            "--init",
            "--name",
            self.name,
            *_limits(memory_mb, pids, network),
            "-v",
            f"{self._dir}:/rllm:ro",
            "-w",
            "/testbed",
            "-e",
            "RLLM_SWE_REPO=/testbed",
            "-e",
            "RLLM_SWE_BASE=git",
            image,
            "sh",
            "-c",
            _LAUNCHER,
        ]
        self._closed_reason, self._lock, self._buffer, self._stderr = (
            None,
            threading.Lock(),
            b"",
            CappedBuffer(64 << 10),
        )
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self._run = SimpleNamespace(proc=proc)  # what SandboxSession's request code reads
        self._drainer = threading.Thread(target=self._drain_stderr, daemon=True, name="rllm-docker-session")
        self._drainer.start()
        self._timer = threading.Timer(wall_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _finish(self, reason: str) -> None:
        with self._lock:
            if self._closed_reason is not None:
                return
            self._closed_reason = reason
            self._timer.cancel()
            _remove(self.cli, self.name)  # the container and all in it: killing the docker CLI alone would not
            proc = self._run.proc
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            self._drainer.join(timeout=5)
            for pipe in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def _exit_reason(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._run.proc.wait(timeout=5)
        code = self._run.proc.returncode
        # docker run's own codes: 125 the engine refused to start it, 137 killed (memory, or `docker rm -f`)
        return {None: "no_reply", 125: "docker_error", 137: "killed"}.get(code, f"exit:{code}")

    def _drain_stderr(self) -> None:
        """Keep reading stderr (a full pipe would block the container); the first 64 KiB are kept."""
        stderr = self._run.proc.stderr
        for chunk in iter(lambda: stderr.read1(1 << 16), b""):
            self._stderr.add(chunk)
        stderr.close()


def open_session(task: dict, *, wall_s: float, memory_mb: int) -> DockerSession:
    """The workspace of one episode of `task`, its image pulled if needed, the server answering."""
    image = docker_image(task)
    ensure_image(image)
    session = DockerSession(image, wall_s=wall_s, memory_mb=memory_mb)
    try:
        session.request({"op": "ping"}, timeout_s=120)
    except BaseException:
        session.close()
        raise
    return session


# ---- grading ----------------------------------------------------------------------------------------------------


def grade_in_docker(
    task: dict,
    diff: str,
    *,
    timeout_s: float = 1800.0,
    partial_credit: bool = False,
    memory_mb: int = 4096,
    network: str = "none",
    policy: bool = True,
) -> GradeResult:
    """The reward of `diff` on `task`, tested in a fresh container of its image (see the module docstring).
    `policy=False` skips `check_submission`; the protected files are put back all the same."""
    if not diff.strip():
        return GradeResult(0.0, False, "empty_patch", "the repository was not changed")
    if policy and (why := check_submission(diff)) is not None:
        return GradeResult(0.0, False, "protected_path", why)
    spec = eval_spec(task)
    image = docker_image(task)
    ensure_image(image)
    run = run_grader(image, diff, spec.eval_script, timeout_s=timeout_s, memory_mb=memory_mb, network=network)
    if run.patch_failed is None and run.killed_reason is None:
        outcomes = spec.read_log(run.output)
        if outcomes is None:
            run.killed_reason = "invalid_log"  # swebench found no valid test run in the log
        else:
            run.outcomes = outcomes
    run.output = run.output[-4000:]
    return verdict(run, list(task["FAIL_TO_PASS"]), list(task["PASS_TO_PASS"]), partial_credit)


def grade_files(diff: str, eval_script: str) -> dict[str, str]:
    """The files a grading container runs from (`bash grade.sh` in the repository, see `_GRADE_SCRIPT`)."""
    harness = (_HERE / "rllm_swe_harness.py").read_text()
    return {"grade.sh": _GRADE_SCRIPT, "submission.diff": diff, "eval.sh": eval_script, "rllm_swe_harness.py": harness}


def run_grader(
    image: str, diff: str, eval_script: str, *, timeout_s: float, memory_mb: int = 4096, network: str = "none"
) -> TestRun:
    """Apply `diff` in a fresh container of `image` and run `eval_script`; the whole log in `output`."""
    cli, name = _docker(), f"rllm-grade-{secrets.token_hex(6)}"
    directory = _file_dir(grade_files(diff, eval_script))
    argv = [
        cli,
        "run",
        "-i",
        "--rm",
        "--init",
        "--name",
        name,
        *_limits(memory_mb, 1024, network),
        "-v",
        f"{directory}:/rllm-grade:ro",
        "-w",
        "/testbed",
        image,
        "bash",
        "/rllm-grade/grade.sh",
    ]
    start, killed = time.monotonic(), None
    try:
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                code, killed = None, "timeout"
            _remove(cli, name)
            proc.kill()
            proc.wait()
            log.seek(0)
            output = log.read(_MAX_LOG).decode("utf-8", errors="replace")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if code == 125 and _APPLIED not in output:
        raise DockerError(f"docker run {image} failed: {output.strip()[-1500:]}")
    return read_grade_output(output, code, time.monotonic() - start, killed)


def read_grade_output(output: str, code: int | None, duration_s: float, killed: str | None = None) -> TestRun:
    """What a grading container's log says: the diff refused, the protected files it changed (put back), or a
    script that could not run."""
    run = TestRun(output=output, duration_s=duration_s, killed_reason=killed)
    applied, refused = output.find(_APPLIED), output.find(_NOT_APPLIED)
    # The restore prints its line right after the applied marker, before the eval script (and so the repository's
    # code) runs: only that line counts, so nothing the tests print can claim or deny it.
    after_applied = output[applied + len(_APPLIED) :].lstrip("\n").split("\n", 1)[0] if applied >= 0 else ""
    if after_applied.startswith(RESTORED_MARKER):
        run.restored = json.loads(after_applied[len(RESTORED_MARKER) :])
    if killed is not None:
        return run
    unprotected = _UNPROTECTED in output[: applied if applied >= 0 else len(output)] or (
        applied >= 0 and not after_applied.startswith(RESTORED_MARKER)
    )
    if unprotected:  # fail closed: tests run on files the diff may have changed say nothing
        run.killed_reason = "error"
        run.output += "\n[rllm: the grader could not protect the test files (the image needs a python3 >= 3.7)]"
        return run
    if refused >= 0 and (applied < 0 or refused < applied):  # nothing of the agent's runs before either marker
        run.patch_failed = output[:refused].strip()[-1500:]
    elif applied < 0:
        run.killed_reason = "error"
        run.output += f"\n[rllm: the grading script did not run; docker run exited {code}]"
    elif code == 137:
        run.killed_reason = "killed"  # out of memory, or removed
    return run

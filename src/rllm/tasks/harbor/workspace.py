"""Where a Harbor task's commands run: `SandboxWorkspace` (rllm's sandbox, no Docker) or `DockerWorkspace` (the task's
own image). Both do the same four things, so the env and the verifier do not care which: `run(command)` in the
working directory, `put(folder, "tests" | "solution")` (a copy of a task folder at /tests or /solution), the verifier
script, and `close()`.

The sandbox: one `SandboxSession` per episode running rllm's workspace server (`rllm/tasks/swe/workspace_server.py`,
standard library only) with the working directory (e.g. /app) as its repository: an overlay on a size-capped tmpfs
over the task's staged files (`staged_tree`: environment/'s files placed as the Dockerfile's COPY lines say, made
once per task content under `$RLLM_HOME/harbor/trees`), no network, uid 65534, a cgroup and a wall clock (the agent's
and the verifier's timeouts, plus a margin). /tests and /solution are read-only binds of folders of our own, empty
until the verifier (or the oracle) fills them from the task folder; /logs/agent, /logs/verifier and /logs/artifacts
lead into a directory on the sandbox's /tmp (Harbor mounts them; here they live as long as the episode). `python`,
`python3` (the host's interpreter, standard library only) and, when the Dockerfile pip-installs it, `pytest` (rllm's
sandbox test runtime) come first on PATH.

Docker: `docker build` of environment/ (tagged by its content, built once) or [environment].docker_image, one
container per episode (`sleep infinity`, labelled rllm-harbor=1, removed at the end), commands by `docker exec` in
the image's WORKDIR (or [environment].workdir), files by `docker cp`; [environment].network_mode = "no-network" means
`--network none`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path, PurePosixPath

from rllm.errors import InfraError
from rllm.tasks.harbor.plan import Plan
from rllm.tasks.harbor.spec import LOGS_DIR, SOLUTION_DIR, TESTS_DIR, HarborTask
from rllm.tasks.harbor.verifier import VERIFY_SCRIPT

__all__ = ["DockerWorkspace", "SandboxWorkspace", "staged_tree"]

_SERVER = Path(__file__).resolve().parent.parent / "swe"  # the workspace server and its diff helper
BIN_MOUNT = "/opt/rllm-harbor/bin"
LOGS_TMP = "/tmp/.rllm-harbor-logs"  # what /logs/agent, /logs/verifier, /logs/artifacts lead to in the sandbox
_LOCK = threading.Lock()


def harbor_home() -> Path:
    from rllm.fsutil import rllm_home

    home = rllm_home() / "harbor"
    home.mkdir(parents=True, exist_ok=True)
    return home


# ---- the sandbox ------------------------------------------------------------------------------------------------


class SandboxWorkspace:
    kind = "sandbox"

    def __init__(self, task: HarborTask, plan: Plan, *, sandbox=None, env: dict[str, str] | None = None) -> None:
        from rllm.sandbox import RepoMount, SandboxLimits, default_sandbox, host_python

        self.workdir = plan.workdir
        tree = staged_tree(task, plan)
        self._dir = Path(tempfile.mkdtemp(prefix="rllm-harbor-"))
        try:
            os.chmod(self._dir, 0o755)
            logs = self._dir / "logs"
            for name in ("tests", "solution", "logs"):
                (self._dir / name).mkdir(mode=0o755)
            for name in ("agent", "verifier", "artifacts"):
                (logs / name).symlink_to(f"{LOGS_TMP}/{name}")
            binds = {
                str(self._dir / "tests"): TESTS_DIR,
                str(self._dir / "solution"): SOLUTION_DIR,
                str(logs): LOGS_DIR,
                str(_bin_dir(plan.pytest)): BIN_MOUNT,
            }
            variables = {
                **plan.env,
                **(env or {}),
                "RLLM_SWE_REPO": plan.workdir,
                "RLLM_SWE_BASE": "git",  # the server skips making the directory a git repository (no diff is asked)
                "RLLM_SWE_PATH_PREFIX": BIN_MOUNT,
                "RLLM_HARBOR_LOGS": LOGS_TMP,
            }
            if plan.pytest:
                from rllm.tasks.swe.store import RUNTIME_MOUNT, runtime_dir

                binds[str(runtime_dir())] = RUNTIME_MOUNT
                variables["PYTHONPATH"] = ":".join(p for p in (RUNTIME_MOUNT, variables.get("PYTHONPATH")) if p)
            wall = task.agent_timeout_s + task.verifier_timeout_s + 300
            limits = SandboxLimits(
                wall_s=wall,
                cpu_s=int(wall),
                memory_mb=task.memory_mb or 2048,
                pids=256,
                tmpfs_mb=256,
                output_bytes=1 << 20,
            )
            files = {
                "rllm_swe_server.py": (_SERVER / "workspace_server.py").read_text(),
                "rllm_swe_patches.py": (_SERVER / "patches.py").read_text(),
                "rllm_harbor_verify.sh": VERIFY_SCRIPT,
            }
            repo = RepoMount(str(tree), dest=plan.workdir, size_mb=max(task.storage_mb or 512, 64))
            argv = [host_python()[1], "-s", "-B", "/work/rllm_swe_server.py"]
            self.session = (sandbox or default_sandbox()).session(
                argv, files=files, limits=limits, env=variables, repo=repo, ro_binds=binds
            )
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        try:
            self.session.request({"op": "ping"}, timeout_s=60)
            self.run(f"mkdir -p {LOGS_TMP}/agent {LOGS_TMP}/verifier {LOGS_TMP}/artifacts", 30)
        except BaseException:
            self.close()
            raise

    def run(self, command: str, timeout_s: float, max_chars: int = 10000) -> tuple[str, str | None]:
        """(the output, stdout and stderr together, ending in `[exit code N]` on failure; why it failed or None)."""
        request = {
            "op": "tool",
            "name": "execute_bash",
            "args": {"cmd": command},
            "timeout_s": timeout_s,
            "max_chars": max_chars,
        }
        reply = self.session.request(request, timeout_s=timeout_s + 30)
        failure = str(reply.get("error_kind") or "tool_error") if reply.get("is_error") else None
        return str(reply.get("output", "")), failure

    def put(self, source: Path, where: str) -> None:
        """The folder `source` (of the task) at /tests or /solution, replacing what was there."""
        target = self._dir / where
        for child in target.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        _readable(target)

    def verify_command(self, timeout_s: float) -> str:
        return f"bash /work/rllm_harbor_verify.sh {max(math.ceil(timeout_s), 1)}"

    def close(self) -> None:
        session = getattr(self, "session", None)
        if session is not None:
            session.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def staged_tree(task: HarborTask, plan: Plan) -> Path:
    """The working directory's starting files for `task` as `plan` places them, made once per content (read-only by
    convention: episodes mount it under an overlay)."""
    from rllm.sandbox import make_editable

    digest = hashlib.sha256()
    digest.update(json.dumps([plan.workdir, plan.copies, plan.dirs]).encode())
    root_dir = task.environment_dir
    for path in sorted(root_dir.rglob("*")) if root_dir.is_dir() else []:
        digest.update(f"\0{path.relative_to(root_dir)}\0{path.lstat().st_mode}\0".encode())
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in task.name)
    home = harbor_home() / "trees"
    root = home / f"{safe}-{digest.hexdigest()[:16]}"
    if (root / ".complete").exists():
        return root / "tree"
    with _LOCK:
        if (root / ".complete").exists():
            return root / "tree"
        home.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=home, prefix=".tree-"))
        try:
            tree = tmp / "tree"
            tree.mkdir()
            for source, dest in plan.copies:
                target = tree / PurePosixPath(dest).relative_to(plan.workdir)
                origin = root_dir / source
                if origin.is_dir() and not origin.is_symlink():
                    shutil.copytree(origin, target, symlinks=True, dirs_exist_ok=True)
                else:
                    if target.is_dir():
                        target = target / origin.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target, follow_symlinks=False)
            for directory in plan.dirs:
                (tree / PurePosixPath(directory).relative_to(plan.workdir)).mkdir(parents=True, exist_ok=True)
            _readable(tree)
            make_editable(tree)
            os.chmod(tmp, 0o755)
            (tmp / ".complete").write_text(task.name)
            try:
                os.replace(tmp, root)
            except OSError:  # another process made it meanwhile
                if not (root / ".complete").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was renamed into place
    return root / "tree"


def _readable(root: Path) -> None:
    """Every directory enterable and every file readable by the sandbox's user (uid 65534), scripts executable."""
    for directory, _, files in os.walk(root):
        os.chmod(directory, os.stat(directory).st_mode | 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode | 0o444
                os.chmod(path, mode | (0o111 if name.endswith(".sh") else 0))


def _bin_dir(pytest: bool) -> Path:
    """`python` and `python3` (the sandbox's interpreter, which is not on its PATH), and `pytest` when wanted."""
    from rllm.sandbox import host_python

    directory = harbor_home() / ("bin-pytest" if pytest else "bin")
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    python = host_python()[1]
    for name in ("python", "python3"):
        link = directory / name
        if not link.is_symlink() or os.readlink(link) != python:
            tmp = directory / f".{name}.{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(python)
            os.replace(tmp, link)
    if pytest:
        for name in ("pytest", "py.test"):
            script = directory / name
            text = '#!/bin/sh\nexec python3 -m pytest "$@"\n'
            if not script.is_file() or script.read_text() != text:
                tmp = directory / f".{name}.{os.getpid()}"
                tmp.write_text(text)
                os.chmod(tmp, 0o755)
                os.replace(tmp, script)
    return directory


# ---- Docker -----------------------------------------------------------------------------------------------------


class DockerWorkspace:
    kind = "docker"

    def __init__(self, task: HarborTask, *, env: dict[str, str] | None = None) -> None:
        self.cli = shutil.which("docker") or "docker"
        self.name = f"rllm-harbor-{secrets.token_hex(6)}"
        self.workdir = task.workdir
        image = task.docker_image or self._build(task)
        if task.docker_image:
            self._pull(image, task)
        argv = [self.cli, "run", "-d", "--init", "--name", self.name, "--label", "rllm-harbor=1"]
        if task.memory_mb:
            argv += ["--memory", f"{task.memory_mb}m"]
        cpus = task.environment.get("cpus")
        if isinstance(cpus, (int, float)) and not isinstance(cpus, bool) and cpus > 0:
            argv += ["--cpus", str(cpus)]
        if task.network == "no-network":
            argv += ["--network", "none"]
        if task.workdir:
            argv += ["-w", task.workdir]
        for key, value in {**task.environment_env, **(env or {})}.items():
            argv += ["-e", f"{key}={value}"]
        _docker(argv + [image, "sh", "-c", "sleep infinity"], 300, f"docker run {image}")
        try:
            probe, _ = self.run("command -v bash >/dev/null && echo bash; command -v timeout >/dev/null && echo t", 60)
            self.shell = "bash" if "bash" in probe.split() else "sh"
            self.has_timeout = "t" in probe.split()
            self._exec(["mkdir", "-p", f"{LOGS_DIR}/agent", f"{LOGS_DIR}/verifier", f"{LOGS_DIR}/artifacts"], 60)
            self._write_script()
        except BaseException:
            self.close()
            raise

    def run(self, command: str, timeout_s: float, max_chars: int = 10000) -> tuple[str, str | None]:
        shell = getattr(self, "shell", "sh")
        inner = [shell, "-c", command]
        if getattr(self, "has_timeout", False):
            inner = ["timeout", "-k", "5", str(max(int(timeout_s), 1)), *inner]
        argv = [self.cli, "exec", *(["-w", self.workdir] if self.workdir else []), self.name, *inner]
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=timeout_s + 30, check=False, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired as e:
            text = ((e.stdout or b"") + (e.stderr or b"")).decode(errors="replace")
            return _cut(text, max_chars) + f"\n[the command timed out after {timeout_s:g} s and was killed]", "timeout"
        text = _cut((done.stdout + done.stderr).decode(errors="replace"), max_chars)
        if done.returncode in (124, 137) and getattr(self, "has_timeout", False):
            return text + f"\n[the command timed out after {timeout_s:g} s and was killed]", "timeout"
        return (text + ("" if done.returncode == 0 else f"\n[exit code {done.returncode}]")), None

    def put(self, source: Path, where: str) -> None:
        target = {"tests": TESTS_DIR, "solution": SOLUTION_DIR}[where]
        self._exec(["sh", "-c", f"rm -rf {target} && mkdir -p {target}"], 60)
        if source.is_dir():
            _docker([self.cli, "cp", f"{source}/.", f"{self.name}:{target}"], 600, f"docker cp {source}")

    def verify_command(self, timeout_s: float) -> str:
        return f"bash /rllm-harbor/verify.sh {max(math.ceil(timeout_s), 1)}"

    def close(self) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                [self.cli, "rm", "-f", self.name],
                capture_output=True,
                timeout=60,
                check=False,
                stdin=subprocess.DEVNULL,
            )

    def _exec(self, argv: list[str], timeout_s: float) -> None:
        _docker([self.cli, "exec", self.name, *argv], timeout_s, f"docker exec {shlex.join(argv)[:80]}")

    def _write_script(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "verify.sh").write_text(VERIFY_SCRIPT)
            os.chmod(Path(tmp) / "verify.sh", 0o755)
            self._exec(["mkdir", "-p", "/rllm-harbor"], 60)
            _docker([self.cli, "cp", f"{tmp}/.", f"{self.name}:/rllm-harbor"], 120, "docker cp verify.sh")

    def _build(self, task: HarborTask) -> str:
        digest = hashlib.sha256()
        for path in sorted(task.environment_dir.rglob("*")):
            digest.update(f"\0{path.relative_to(task.environment_dir)}\0".encode())
            if path.is_file() and not path.is_symlink():
                digest.update(path.read_bytes())
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in task.name.lower()).strip("-.") or "task"
        tag = f"rllm-harbor-{safe}:{digest.hexdigest()[:12]}"
        inspect = [self.cli, "image", "inspect", tag]
        if subprocess.run(inspect, capture_output=True, check=False, stdin=subprocess.DEVNULL).returncode:
            timeout = float(task.environment.get("build_timeout_sec") or 600)
            _docker([self.cli, "build", "-t", tag, str(task.environment_dir)], timeout, f"docker build of {task.name}")
        return tag

    def _pull(self, image: str, task: HarborTask) -> None:
        inspect = [self.cli, "image", "inspect", image]
        if subprocess.run(inspect, capture_output=True, check=False, stdin=subprocess.DEVNULL).returncode:
            timeout = float(task.environment.get("build_timeout_sec") or 600)
            _docker([self.cli, "pull", image], timeout, f"docker pull {image}")


class DockerCommandError(InfraError):
    """A docker command failed (a build, a pull, the engine): an infra error, retried."""


def _docker(argv: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise DockerCommandError(f"{what} took more than {timeout_s:g} s") from None
    except OSError as e:
        raise DockerCommandError(f"{what} failed: {e}") from None
    if done.returncode != 0:
        raise DockerCommandError(f"{what} failed: {(done.stderr or done.stdout).strip()[-1500:]}")
    return done


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    return f"{text[:head]}\n[... {len(text) - head - tail} characters truncated ...]\n{text[len(text) - tail :]}"

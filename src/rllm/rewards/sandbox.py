"""The only place rllm runs model-written code: a program under bubblewrap, in a cgroup of its own.

Isolation layers, and why each one (each guards against another failing open on some machine):

- Namespaces (bwrap): new user, PID, network, IPC, UTS, cgroup and mount namespaces. The network namespace holds
  only a loopback nobody listens on, so nothing is reachable, not even the host's 127.0.0.1. The PID namespace
  hides host processes, and every process in it dies with its init (`--die-with-parent` ties that to us).
- Identity: the program runs as uid/gid 65534, no capabilities, no supplementary groups, no_new_privs, and cannot
  make further user namespaces. Its uid on the host is never 0. When rllm runs as root (CI), plain
  `bwrap --uid 65534` maps the sandbox user to host root, and the kernel lets such a process write files that
  check only the owner: measured, it could write host sysctls (/proc/sys/kernel/core_pattern: a root escape).
  So as root, bwrap joins a user namespace made once per process mapping 0->0 (bwrap's own setup must reach the
  Python under /root) and 65534->65534, and `setpriv` drops to 65534 before exec. As any other user, bwrap maps
  65534 to the caller's uid as usual.
- Filesystem: read-only /usr, /lib*, /bin, the ld.so files and the Python installation the host runs
  (`sys.base_prefix`) with its site-packages hidden (stdlib only, and no .pth files to run at every start). The
  root is a read-only tmpfs: no home, no repository, no /etc beyond those files. The only writable places are two
  fresh size-capped tmpfs, the working directory /work and /tmp.
- Environment: bwrap itself starts with an empty environment and the program gets only PATH, HOME, LANG,
  PYTHONDONTWRITEBYTECODE and PYTHONHASHSEED, so no secret of the host is in any /proc/*/environ inside.
- Resources: a cgroup per run (memory with no swap, pids) that the launcher joins before bwrap starts: bash
  waits on a gate pipe until the host has moved it into the cgroup and set its rlimits (CPU, file size, open
  files, core, address space). A wall clock kills the process group and every process in the cgroup. stdout,
  stderr and the result channel are read concurrently with caps; a run that exceeds one is killed. OOM kills and
  pid-limit hits are read back from the cgroup to say why a run ended.
- Fail closed: without bwrap, user namespaces or a writable cgroup the first run raises `SandboxUnavailableError`
  naming the fix. Only explicit opt-ins relax it: `unsafe=True` or `RLLM_SANDBOX_UNSAFE=1` (a plain subprocess,
  env cleared, rlimits, temp dir) and `require_cgroup=False` (bwrap with rlimits only).

Result channel: fd 3 inside the sandbox is a pipe whose bytes come back as `SandboxResult.result`, apart from
stdout. A harness should close fd 3 before it runs untrusted code, so that code cannot forge results.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rllm.errors import InfraError, RllmError

__all__ = ["Sandbox", "SandboxLimits", "SandboxResult", "SandboxUnavailableError", "default_sandbox"]

BWRAP = "bwrap"  # resolved on PATH at check time
CGROUP_ROOT = Path("/sys/fs/cgroup")
WORKDIR = "/work"
RESULT_FD = 3
NOBODY = 65534
_BWRAP_PIDS = 2  # bwrap's monitor and the namespace's init count against pids.max as well
_SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",  # same set/dict iteration order on every run: rewards stay reproducible
}
_NO_CGROUP = (
    "no writable cgroup (v1 pids+memory or v2 memory+pids) for per-run limits: run as root, or delegate a cgroup v2 "
    "subtree (systemd-run --user -p Delegate=yes ...) and set RLLM_SANDBOX_CGROUP to it, or pass "
    "Sandbox(require_cgroup=False) to rely on rlimits only"
)
_NO_USERNS = (
    "user namespaces are disabled: sysctl -w kernel.unprivileged_userns_clone=1 (Debian), "
    "sysctl -w user.max_user_namespaces=15000, or on Ubuntu 24.04+ sysctl -w "
    "kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for bwrap)"
)


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    pids: int = 64  # processes and threads of the program
    output_bytes: int = 1 << 20  # each of stdout and stderr
    tmpfs_mb: int = 64  # each of /work and /tmp
    result_bytes: int = 1 << 20
    open_files: int = 256

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value!r}")


@dataclass
class SandboxResult:
    exit_code: int | None  # negative: killed by that signal; None: we killed it (timeout, output_limit)
    stdout: bytes
    stderr: bytes
    result: bytes
    killed_reason: str | None  # None, "timeout", "memory", "pids", "output_limit", "signal:<name>"
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None


class SandboxUnavailableError(RllmError):
    """This machine cannot sandbox code; the message names what is missing and how to fix it."""


# ---- cgroups: one per run, v1 (a directory per controller) or v2 (one directory) ----


def _write(path: Path, value: object) -> None:
    path.write_text(str(value))


def _counter(path: Path, key: str) -> int:
    """A `key value` line of a cgroup events file; 0 when the file or key is missing."""
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def _own_v1_cgroups() -> dict[str, str]:
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            own[controller] = path
    return own


_v2_ready: set[Path] = set()


def _enable_v2_controllers(parent: Path) -> None:
    """memory and pids must be enabled in the subtree_control of every level down to `parent`."""
    if parent in _v2_ready:
        return
    parent.mkdir(exist_ok=True)
    levels = [parent, *parent.parents]
    for level in reversed(levels[: levels.index(CGROUP_ROOT) + 1] if CGROUP_ROOT in levels else [parent]):
        control = level / "cgroup.subtree_control"
        missing = {"memory", "pids"} - set(control.read_text().split())
        if missing:
            _write(control, " ".join(f"+{c}" for c in sorted(missing)))
    _v2_ready.add(parent)


def _cgroup_parents() -> tuple[bool, list[Path]]:
    """(is_v2, parent dirs). v1 nests under this process's own cgroups, so limits set on us still bind; v2 needs a
    parent without processes of its own (the "no internal processes" rule): `rllm-sandbox` at the root, or the
    delegated directory named by RLLM_SANDBOX_CGROUP."""
    if all((CGROUP_ROOT / c / "cgroup.procs").exists() for c in ("pids", "memory")):
        own = _own_v1_cgroups()
        return False, [CGROUP_ROOT / c / own.get(c, "/").lstrip("/") for c in ("pids", "memory")]
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        parent = Path(os.environ.get("RLLM_SANDBOX_CGROUP") or CGROUP_ROOT / "rllm-sandbox")
        _enable_v2_controllers(parent)
        return True, [parent]
    raise SandboxUnavailableError(f"{_NO_CGROUP} (no cgroup filesystem under {CGROUP_ROOT})")


class _Cgroup:
    _serial = itertools.count()

    def __init__(self, dirs: list[Path], v2: bool) -> None:
        self.dirs, self.v2 = dirs, v2

    @classmethod
    def create(cls, limits: SandboxLimits) -> _Cgroup:
        try:
            v2, parents = _cgroup_parents()
            name = f"rllm-sandbox-{os.getpid()}-{next(cls._serial)}"
            dirs = []
            for parent in parents:
                (parent / name).mkdir()
                dirs.append(parent / name)
        except OSError as e:
            cls(dirs if "dirs" in locals() else [], False).remove()
            raise SandboxUnavailableError(f"{_NO_CGROUP} ({e})") from e
        cgroup = cls(dirs, v2)
        try:
            cgroup._limit(limits)
        except BaseException:
            cgroup.remove()
            raise
        return cgroup

    def _limit(self, limits: SandboxLimits) -> None:
        memory, pids = limits.memory_mb << 20, limits.pids + _BWRAP_PIDS
        if self.v2:
            (group,) = self.dirs
            _write(group / "memory.max", memory)
            _write(group / "memory.swap.max", 0)
            _write(group / "pids.max", pids)
            _write(group / "memory.oom.group", 1)  # an OOM kills the whole sandbox, not one process of it
        else:
            pids_dir, memory_dir = self.dirs
            _write(pids_dir / "pids.max", pids)
            _write(memory_dir / "memory.limit_in_bytes", memory)
            if (memory_dir / "memory.memsw.limit_in_bytes").exists():  # no swap either
                _write(memory_dir / "memory.memsw.limit_in_bytes", memory)

    def add(self, pid: int) -> None:
        for group in self.dirs:
            _write(group / "cgroup.procs", pid)

    def oom_killed(self) -> bool:
        if self.v2:
            return _counter(self.dirs[0] / "memory.events", "oom_kill") > 0
        control = self.dirs[1] / "memory.oom_control"
        return _counter(control, "oom_kill") > 0 or _counter(control, "under_oom") > 0

    def pids_exhausted(self) -> bool:
        return _counter(self.dirs[0] / "pids.events", "max") > 0

    def pids(self) -> set[int]:
        found = set()
        for group in self.dirs:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (group / "cgroup.procs").read_text().split())
        return found

    def kill(self) -> None:
        if self.v2 and (self.dirs[0] / "cgroup.kill").exists():
            _write(self.dirs[0] / "cgroup.kill", 1)
            return
        for _ in range(1000):  # v1: processes may fork while we kill; pids.max bounds how many
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left and remove the directories. Killed processes leave asynchronously: retry briefly."""
        for group in self.dirs:
            for attempt in range(400):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or attempt == 399:
                        warnings.warn(f"rllm sandbox: could not remove cgroup {group}: {e}", stacklevel=2)
                        break
                    self.kill()
                    time.sleep(0.005)


# ---- what runs: tools, the Python inside, the user namespace used as root, bwrap's arguments ----


@dataclass(frozen=True)
class _Tools:
    bwrap: str
    bash: str
    setpriv: str | None  # only as root


def _find_tools(as_root: bool) -> _Tools:
    bwrap, bash = shutil.which(BWRAP), shutil.which("bash")
    setpriv = shutil.which("setpriv") if as_root else None
    if not bwrap:
        raise SandboxUnavailableError(f"bubblewrap is not installed ({BWRAP!r} not found): apt-get install bubblewrap")
    if not bash:
        raise SandboxUnavailableError("bash is needed to start the sandbox: apt-get install bash")
    if as_root and not setpriv:
        raise SandboxUnavailableError("setpriv is needed to drop root in the sandbox: apt-get install util-linux")
    return _Tools(bwrap, bash, setpriv)


def _python() -> tuple[str, str]:
    """(installation prefix, interpreter path) of the Python running rllm; a venv's is its base installation's."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    if not exe.startswith(prefix + "/"):
        exe = f"{prefix}/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    return prefix, exe


_userns_lock = threading.Lock()
_userns: int | None = None
_USERNS_HOLDER = (  # unshare a user namespace, wait for the maps, forbid nested user namespaces in it, wait to exit
    "import ctypes,os;ok=ctypes.CDLL(None).unshare(0x10000000)==0;os.write(1,b'1' if ok else b'0');os.read(0,1);"
    "open('/proc/sys/user/max_user_namespaces','w').write('0');os.write(1,b'2');os.read(0,1)"
)


def _root_user_namespace() -> int:
    """An fd of a user namespace mapping 0->0 and 65534->65534, made once per process (see module docstring)."""
    global _userns
    with _userns_lock:
        if _userns is None:
            holder = subprocess.Popen(
                [sys.executable, "-S", "-c", _USERNS_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={}
            )
            try:
                if holder.stdout.read(1) != b"1":
                    raise SandboxUnavailableError(f"cannot create a user namespace: {_NO_USERNS}")
                for name in ("uid_map", "gid_map"):
                    _write(Path(f"/proc/{holder.pid}/{name}"), f"0 0 1\n{NOBODY} {NOBODY} 1\n")
                holder.stdin.write(b"x")
                holder.stdin.flush()
                if holder.stdout.read(1) != b"2":
                    raise SandboxUnavailableError("cannot configure the sandbox's user namespace")
                fd = os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
                _userns = _above_stdio(fd)
            finally:
                holder.kill()
                holder.communicate()
    return _userns


def _above_stdio(fd: int) -> int:
    """Move fd to 10 or above, so that renumbering the result pipe to fd 3 in the launcher cannot clobber it."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def _checked_path(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or path.parts in ((), (".",)):
        raise ValueError(f"sandbox file paths must be relative, without '..': {name!r}")
    return path


def _file_fds(files: dict[str, str | bytes], stack: contextlib.ExitStack) -> list[tuple[int, str]]:
    """One memfd per file (bwrap copies it into /work), each with its checked relative path."""
    out = []
    for name, content in files.items():
        path = _checked_path(name)
        fd = _above_stdio(os.memfd_create("rllm-sandbox-file", os.MFD_CLOEXEC))
        stack.callback(os.close, fd)
        data = memoryview(content.encode() if isinstance(content, str) else content)
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
        out.append((fd, str(path)))
    return out


def _bwrap_argv(tools: _Tools, limits: SandboxLimits, files: list[tuple[int, str]], status_fd: int) -> list[str]:
    """bwrap up to (not including) the program's argv."""
    argv = [tools.bwrap]
    if tools.setpriv:
        userns = str(_root_user_namespace())  # also --sync-fd: bwrap then closes it before exec, so no leak inside
        argv += ["--userns", userns, "--sync-fd", userns, "--unshare-pid", "--unshare-net", "--unshare-ipc"]
        argv += ["--unshare-uts", "--unshare-cgroup", "--cap-drop", "ALL"]
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]  # for setpriv
    else:
        argv += ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        argv += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv"]
    for key, value in _SANDBOX_ENV.items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime"):
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += _python_mounts()
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for writable in ("/tmp", WORKDIR):
        argv += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", writable]
    for directory in sorted({str(p) for _, name in files for p in PurePosixPath(name).parents if str(p) != "."}):
        argv += ["--perms", "1777", "--dir", f"{WORKDIR}/{directory}"]
    for fd, name in files:
        argv += ["--perms", "0644", "--file", str(fd), f"{WORKDIR}/{name}"]
    argv += ["--remount-ro", "/", "--chdir", WORKDIR, "--json-status-fd", str(status_fd)]
    if tools.setpriv:
        argv += [tools.setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
    return argv


def _python_mounts() -> list[str]:
    prefix, _ = _python()
    site = f"{prefix}/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    argv = []
    if not prefix.startswith("/usr/"):
        for parent in reversed(PurePosixPath(prefix).parents[:-1]):  # e.g. /root, /root/.pyenv: traversable
            argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", prefix, prefix]
    if os.path.isdir(site):
        argv += ["--tmpfs", site, "--remount-ro", site]
    return argv


# ---- one run: launch behind a gate, limits, I/O pump, outcome ----


def _address_space_mb(limits: SandboxLimits, with_cgroup: bool) -> int:
    # With a cgroup, the address-space limit is only a backstop: threads reserve far more than they touch, and a
    # tight one would turn what should be a clean OOM kill ("memory") into MemoryErrors deep inside libraries.
    return max(4 * limits.memory_mb, limits.memory_mb + 1024) if with_cgroup else limits.memory_mb


def _set_rlimits(pid: int, limits: SandboxLimits, with_cgroup: bool) -> None:
    for kind, value in (
        (resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1)),
        (resource.RLIMIT_FSIZE, (limits.tmpfs_mb << 20,) * 2),
        (resource.RLIMIT_NOFILE, (limits.open_files,) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_AS, (_address_space_mb(limits, with_cgroup) << 20,) * 2),
    ):
        resource.prlimit(pid, kind, value)


@dataclass
class _Launch:
    command: list[str]  # what bash execs once the gate opens
    cwd: str
    env: dict[str, str]
    child_fds: list[int]  # closed here right after the spawn (the child holds them)
    shared_fds: list[int]  # inherited too, but kept open here (the root user namespace)
    status_r: int | None = None  # bwrap's --json-status-fd


class _Capped:
    def __init__(self, cap: int) -> None:
        self.cap, self.chunks, self.size = cap, [], 0

    def add(self, data: bytes) -> bool:
        """Keep data up to the cap; False once the cap is exceeded."""
        self.chunks.append(data[: max(0, self.cap - self.size)])
        self.size += len(data)
        return self.size <= self.cap

    def value(self) -> bytes:
        return b"".join(self.chunks)


def _spawn(bash: str, launch: _Launch, stack: contextlib.ExitStack) -> tuple[subprocess.Popen, int, int]:
    """Start bash held at a gate, in a new session, with the result pipe as its fd 3. Returns (proc, gate write
    end, result read end). Bash leaves the gate only when we write to it: if we die first, it reads EOF and exits."""
    gate_r, gate_w = (_above_stdio(fd) for fd in os.pipe())
    result_r, result_w = (_above_stdio(fd) for fd in os.pipe())
    stack.callback(os.close, result_r)
    script = f'read -r _ <&{gate_r} || exit 125; exec {gate_r}<&- {RESULT_FD}>&{result_w} {result_w}>&-; exec "$@"'
    try:
        proc = subprocess.Popen(
            [bash, "-c", script, "rllm-sandbox", *launch.command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(gate_r, result_w, *launch.child_fds, *launch.shared_fds),
            env=launch.env,
            cwd=launch.cwd,
            start_new_session=True,
        )
    except BaseException:
        os.close(gate_w)
        raise
    finally:
        for fd in (gate_r, result_w, *launch.child_fds):
            os.close(fd)  # only the child holds write ends now, so the pipes reach EOF when it is done
        launch.child_fds = []
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stack.callback(stream.close)
    return proc, gate_w, result_r


def _pump(proc: subprocess.Popen, sinks: dict[int, _Capped], stdin: bytes, deadline: float) -> str | None:
    """Feed stdin, drain the capped outputs, and wait for the launcher to exit (its pidfd, no polling). Returns
    why the run must be killed ("timeout", "output_limit"), or None once everything is done."""
    pidfd = os.pidfd_open(proc.pid)
    with selectors.DefaultSelector() as selector, contextlib.closing(os.fdopen(pidfd, "rb", buffering=0)):
        stdin_fd, pending = proc.stdin.fileno(), memoryview(stdin)
        if pending:
            os.set_blocking(stdin_fd, False)
            selector.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        for fd in (*sinks, pidfd):
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            for key, _ in selector.select(remaining):
                if key.fd == stdin_fd:
                    try:
                        pending = pending[os.write(stdin_fd, pending[:65536]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(stdin_fd)
                        proc.stdin.close()
                elif key.fd == pidfd:
                    selector.unregister(pidfd)  # exited; not reaped yet, so its pid (our pgid) stays reserved
                elif data := os.read(key.fd, 1 << 16):
                    if not sinks[key.fd].add(data):
                        return "output_limit"
                else:
                    selector.unregister(key.fd)
    return None


def _kill(proc: subprocess.Popen, cgroup: _Cgroup | None) -> None:
    """SIGKILL the launcher's session and everything in the cgroup, then reap the launcher."""
    if proc.returncode is None:  # once reaped, its pid may belong to someone else
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if cgroup:
        cgroup.kill()
    proc.wait()


def _bwrap_exit_code(status: bytes) -> int | None:
    """The exit code bwrap reported on --json-status-fd; None if the program never started (a setup failure)."""
    for line in status.decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            if (code := json.loads(line).get("exit-code")) is not None:
                return code
    return None


def _signal_of(code: int) -> tuple[int, str | None]:
    """(exit_code, reason) for a raw code: a signal death is -N, whether from Popen (-N) or bwrap (128+N)."""
    number = -code if code < 0 else code - 128 if 128 < code < 128 + signal.NSIG else 0
    try:
        name = signal.Signals(number).name
    except ValueError:
        return code, None
    return -number, "timeout" if number == signal.SIGXCPU else f"signal:{name}"


class Sandbox:
    """Runs programs in the sandbox, at most `max_workers` at a time. See the module docstring."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        max_workers: int = 2,
        unsafe: bool = False,
        require_cgroup: bool = True,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.max_workers = max_workers
        self.unsafe = unsafe or os.environ.get("RLLM_SANDBOX_UNSAFE") == "1"
        self.require_cgroup = require_cgroup
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._tools: _Tools | None = None
        self._use_cgroup = False

    @staticmethod
    def check(require_cgroup: bool = True) -> None:
        """Raise SandboxUnavailableError, naming the fix, unless sandboxed runs work on this machine."""
        tools = _find_tools(as_root=os.geteuid() == 0)
        if require_cgroup:
            _Cgroup.create(SandboxLimits()).remove()
        with contextlib.ExitStack() as stack:
            status_r, status_w = (_above_stdio(fd) for fd in os.pipe())
            stack.callback(os.close, status_r)
            stack.callback(os.close, status_w)
            probe = subprocess.run(
                [*_bwrap_argv(tools, SandboxLimits(), [], status_w), _python()[1], "-S", "-c", "pass"],
                env={},
                pass_fds=(status_w, *([_root_user_namespace()] if tools.setpriv else [])),
                capture_output=True,
                timeout=60,
                check=False,
            )
        if probe.returncode != 0:
            said = probe.stderr.decode(errors="replace").strip()
            if "namespace" in said or "uid map" in said or "Operation not permitted" in said:
                raise SandboxUnavailableError(f"{_NO_USERNS}; bwrap said: {said}")
            raise SandboxUnavailableError(f"bubblewrap cannot start a sandbox here: {said}")

    def python_argv(self, script_path: str, *args: str) -> list[str]:
        """The host's Python as seen inside. `-s -B` rather than `-I`: the environment inside is ours alone, and -I
        would ignore PYTHONHASHSEED=0 and drop the script's directory from sys.path (a harness importing a file)."""
        return [_python()[1], "-s", "-B", script_path, *args]

    def run(
        self,
        argv: list[str],
        *,
        files: dict[str, str | bytes] | None = None,
        stdin: bytes = b"",
        limits: SandboxLimits | None = None,
    ) -> SandboxResult:
        """Run argv with cwd /work holding `files`; waits while `max_workers` runs are in flight."""
        self._ensure_ready()
        with self._slots:
            return self._run(list(argv), files or {}, stdin, limits or self.limits)

    async def run_async(self, argv: list[str], **kwargs) -> SandboxResult:
        """`run` on this sandbox's own `max_workers` threads: queued runs hold no thread of the loop's default pool
        (which blocking env steps also need)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.max_workers, thread_name_prefix="rllm-sandbox")
        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: self.run(argv, **kwargs))

    def _ensure_ready(self) -> None:
        with self._lock:
            if self._tools is not None:
                return
            if self.unsafe:
                warnings.warn(
                    "rllm Sandbox(unsafe=True): model-written code runs as a plain subprocess with rlimits only; "
                    "it can read your files and reach the network",
                    RuntimeWarning,
                    stacklevel=3,
                )
                self._tools = _Tools(bwrap="", bash=shutil.which("bash") or "/bin/bash", setpriv=None)
                return
            try:
                self.check(require_cgroup=True)
                self._use_cgroup = True
            except SandboxUnavailableError as e:
                if self.require_cgroup or not str(e).startswith(_NO_CGROUP):
                    raise
                self.check(require_cgroup=False)
            self._tools = _find_tools(as_root=os.geteuid() == 0)

    def _run(self, argv: list[str], files: dict, stdin: bytes, limits: SandboxLimits) -> SandboxResult:
        start = time.monotonic()
        with contextlib.ExitStack() as stack:
            cgroup = _Cgroup.create(limits) if self._use_cgroup else None
            if cgroup:
                stack.callback(cgroup.remove)
            launch = (
                self._unsafe_launch(argv, files, stack) if self.unsafe else self._launch(argv, files, limits, stack)
            )
            proc, gate, result_r = _spawn(self._tools.bash, launch, stack)
            stack.callback(lambda: proc.returncode is None and _kill(proc, cgroup))
            try:
                if cgroup:
                    cgroup.add(proc.pid)
                _set_rlimits(proc.pid, limits, cgroup is not None)
                os.write(gate, b"\n")
            finally:
                os.close(gate)
            out, err = _Capped(limits.output_bytes), _Capped(limits.output_bytes)
            result, status = _Capped(limits.result_bytes), _Capped(1 << 16)
            sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err, result_r: result}
            if launch.status_r is not None:
                sinks[launch.status_r] = status
            killed = _pump(proc, sinks, stdin, start + limits.wall_s)
            _kill(proc, cgroup)  # the launcher has exited or must die; this also catches stragglers of its session
            exit_code, reason = self._outcome(proc.returncode, status.value(), killed, cgroup, err.value())
            duration = time.monotonic() - start
            return SandboxResult(exit_code, out.value(), err.value(), result.value(), reason, duration)

    def _outcome(self, returncode, status, killed, cgroup, stderr) -> tuple[int | None, str | None]:
        if killed:
            return None, killed
        if cgroup and cgroup.oom_killed():
            return _signal_of(returncode)[0], "memory"
        code = returncode if self.unsafe else _bwrap_exit_code(status)
        if code is None and not (cgroup and cgroup.pids_exhausted()):
            raise InfraError(f"the sandbox did not start (bwrap exit {returncode}): {stderr.decode(errors='replace')}")
        code, reason = _signal_of(returncode if code is None else code)
        if code != 0 and cgroup and cgroup.pids_exhausted():
            reason = "pids"
        return code, reason

    def _launch(self, argv: list[str], files: dict, limits: SandboxLimits, stack: contextlib.ExitStack) -> _Launch:
        file_fds = _file_fds(files, stack)
        status_r, status_w = (_above_stdio(fd) for fd in os.pipe())
        stack.callback(os.close, status_r)
        command = [*_bwrap_argv(self._tools, limits, file_fds, status_w), *argv]
        shared = [_root_user_namespace()] if self._tools.setpriv else []
        # memfds stay open in the stack (closed after the run); only the status pipe must close right after spawn
        return _Launch(command, "/", {}, [status_w], shared + [fd for fd, _ in file_fds], status_r)

    def _unsafe_launch(self, argv: list[str], files: dict, stack: contextlib.ExitStack) -> _Launch:
        cwd = stack.enter_context(tempfile.TemporaryDirectory(prefix="rllm-unsafe-"))
        for name, content in files.items():
            path = Path(cwd, _checked_path(name))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
        return _Launch(argv, cwd, {**_SANDBOX_ENV, "HOME": cwd}, [], [])


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide shared Sandbox (default limits, 2 workers), created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox()
        return _default

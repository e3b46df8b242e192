"""The only place rllm runs model-written code: a program under bubblewrap, in a cgroup of its own.

Isolation layers, and why each (each one covers for another failing open on some machine):

- Namespaces (bwrap): new user, PID, network, IPC, UTS, cgroup and mount namespaces. The network namespace holds
  only a loopback nobody listens on: nothing is reachable, not even the host's 127.0.0.1. The PID namespace hides
  host processes, and everything in it dies with its PID 1 (a tiny sh, see `_INIT`), which dies with us
  (`--die-with-parent`) and is reaped by bwrap, never orphaned to the host's PID 1.
- Identity: uid/gid 65534, no capabilities, no supplementary groups, no_new_privs, no nested user namespaces, and
  never uid 0 on the host. Run as root (as in CI), plain `bwrap --uid 65534` maps the sandbox user to host root,
  and the kernel lets such a process write whatever checks only the owner: measured, it could write host sysctls
  (kernel.core_pattern is a root escape). So as root, bwrap joins a user namespace made once per process that maps
  0->0 (bwrap's own setup must reach a Python under /root) and 65534->65534, and `setpriv` drops to 65534 before
  exec. As any other user, bwrap maps 65534 to that user, as usual.
- Filesystem: read-only /usr, /lib*, /bin, the ld.so files and the host's Python installation (`sys.base_prefix`)
  with its site-packages hidden (stdlib only, and no .pth files run at every start: -20 ms a run). The root is a
  read-only tmpfs: no home, no repository, no /etc beyond those files. The only writable places are fresh
  size-capped tmpfs: the working directory /work, /tmp and /dev/shm.
- Kernel keyrings, which no namespace isolates: a seccomp filter (bwrap --seccomp, applied before the sandbox's
  PID 1 starts and inherited by everything in it) makes add_key, request_key and keyctl fail with EPERM, as Docker's
  default profile does. Without it a program could read the keys of the session keyring it inherits from the
  trainer, and leave keys in that keyring or in the user keyring of uid 65534 (as root, the user namespace that
  keyring belongs to is made once per trainer process, see Identity) for a later run to find. The filter covers
  every ABI the machine runs (x86-64 with its i386 compat calls and x32, arm64 with arm compat); on another machine
  the sandbox refuses to start.
- Environment: bwrap starts with an empty environment and the program gets only PATH, HOME, LANG,
  PYTHONDONTWRITEBYTECODE and PYTHONHASHSEED, so no secret of the host is in any /proc/*/environ inside.
- Resources: a cgroup per run (memory without swap, pids), which the launcher (bash) joins itself and then sets
  rlimits (CPU, file size, open files, core, address space), all before it execs bwrap. Joining by writing "0" to
  v1's `tasks` skips the global lock that moving a process by pid takes (an RCU grace period, 5-15 ms a run). A
  wall clock kills the run (the sandbox's PID 1, then the launcher's process group and all in the cgroup);
  stdout, stderr and the result channel are read concurrently with caps, and a run exceeding one is killed. OOM
  kills and pid-limit hits are read back from the cgroup to say why a run ended.
- Fail closed: without bwrap, user namespaces or a writable cgroup, `check()` and the first run raise
  `SandboxUnavailableError` naming the fix. Only explicit opt-ins relax that: `unsafe=True` or
  RLLM_SANDBOX_UNSAFE=1 (a plain subprocess: env cleared, rlimits, temp dir) and `require_cgroup=False` (bwrap and
  rlimits, no cgroup).

Result channel: fd 3 inside is a pipe whose bytes come back as `SandboxResult.result`, apart from stdout. A harness
should close fd 3 before it runs untrusted code, so that code cannot forge results.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import os
import platform
import selectors
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rllm.errors import InfraError, SandboxUnavailableError
from rllm.sandbox._cgroup import NO_CGROUP, Cgroup, write_file
from rllm.sandbox.process import CappedBuffer, bwrap_status, host_python, kill_run, signal_of

__all__ = [
    "RepoMount",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "bwrap_only_command",
    "default_sandbox",
    "make_editable",
]

BWRAP = "bwrap"  # resolved on PATH when checked
WORKDIR = "/work"
RESULT_FD = 3
NOBODY = 65534
_USERNS_FD = 4  # where the launcher puts the root user namespace for bwrap; the sandbox's init closes it
_BWRAP_PIDS = 2  # bwrap's monitor and the sandbox's init count against pids.max too
# The sandbox's PID 1. bwrap's own init would outlive bwrap's monitor and be orphaned to the host's PID 1 on every
# run (a zombie for ever if that is a trainer in a container), so bwrap runs --as-pid-1 and this is PID 1: it runs
# the program as its child (signals to a PID 1 from inside are ignored: the program must not be it), reaps orphans
# while it waits, and keeps none of the program's fds once it has them (nor writes "Killed" into its stderr).
_INIT = 'exec 4<&- 5<&0 6>&3 3>&- 0</dev/null; "$@" 0<&5 3>&6 5<&- 6>&- & exec 1>&- 2>&- 5<&- 6>&-; wait $!'
_SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",  # the same set/dict order every run: rewards stay reproducible
}
_NO_USERNS = (
    "user namespaces are disabled: sysctl -w kernel.unprivileged_userns_clone=1 (Debian), "
    "sysctl -w user.max_user_namespaces=15000, or on Ubuntu 24.04+ "
    "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for bwrap)"
)


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    pids: int = 64  # processes and threads of the program
    output_bytes: int = 1 << 20  # each of stdout and stderr
    tmpfs_mb: int = 64  # each of /work, /tmp and /dev/shm; also the largest file
    result_bytes: int = 1 << 20
    open_files: int = 256

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value!r}")


@dataclass(frozen=True)
class RepoMount:
    """A host directory the program sees writable at `dest`, its writes kept on a tmpfs of `size_mb` inside the
    sandbox: the host copy is never written, and everything written is gone when the run (or session) ends.

    As root, an overlay (the host directory read-only below, the tmpfs above) mounted inside the sandbox's own mount
    namespace before the program drops to uid 65534: nothing is copied, and nothing is mounted on the host. Its files
    must be writable by uid 65534 to be edited (`make_editable`). Otherwise, or with `copy=True`, the directory is
    copied onto the tmpfs when the run starts (`cp -R`: fine for small repositories)."""

    source: str
    dest: str = "/testbed"
    size_mb: int = 256
    copy: bool = False

    def __post_init__(self) -> None:
        dest = PurePosixPath(self.dest)
        if not dest.is_absolute() or ".." in dest.parts or len(dest.parts) < 2 or dest.parts[1] in _SYSTEM_DIRS:
            raise ValueError(f"RepoMount.dest must be a new absolute directory such as /testbed, got {self.dest!r}")
        if not os.path.isdir(self.source):
            raise ValueError(f"RepoMount.source is not a directory: {self.source!r}")


_SYSTEM_DIRS = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp", "work", ".rllm"}
_LOWER, _UPPER = "/.rllm/lower", "/.rllm/rw"


def make_editable(root: str | os.PathLike) -> None:
    """Hand a directory tree to the sandbox's user, so that a RepoMount overlay over it lets the program edit its
    files (overlay keeps the lower files' owners). Only as root; otherwise the caller's files are the program's."""
    if os.geteuid() != 0:
        return
    for directory, dirs, files in os.walk(root):
        for name in (directory, *(os.path.join(directory, n) for n in (*dirs, *files))):
            os.lchown(name, NOBODY, NOBODY)


@dataclass
class SandboxResult:
    exit_code: int | None  # -N: died of signal N; None: we killed it (timeout, output_limit)
    stdout: bytes
    stderr: bytes
    result: bytes
    killed_reason: str | None  # None, "timeout", "memory", "pids", "output_limit", "signal:<name>"
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None


# ---- what runs: tools, the Python inside, the user namespace used as root, bwrap's arguments ----


@dataclass(frozen=True)
class _Tools:
    bwrap: str
    bash: str
    setpriv: str | None  # only as root


def _find_tools(as_root: bool) -> _Tools:
    bwrap, bash, setpriv = shutil.which(BWRAP), shutil.which("bash"), shutil.which("setpriv")
    if not bwrap:
        raise SandboxUnavailableError(f"bubblewrap is not installed ({BWRAP!r} not found): apt-get install bubblewrap")
    if not bash:
        raise SandboxUnavailableError("bash is needed to launch the sandbox: apt-get install bash")
    if as_root and not setpriv:
        raise SandboxUnavailableError("setpriv is needed to drop root in the sandbox: apt-get install util-linux")
    return _Tools(bwrap, bash, setpriv if as_root else None)


def _above_stdio(fd: int) -> int:
    """Move fd to 10 or above, so that putting the result pipe on fd 3 in the launcher cannot clobber it."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


_USERNS_HOLDER = (  # unshare a user namespace, wait for its maps, forbid user namespaces inside it, wait to exit
    "import ctypes,os;ok=ctypes.CDLL(None).unshare(0x10000000)==0;os.write(1,b'1' if ok else b'0');os.read(0,1);"
    "open('/proc/sys/user/max_user_namespaces','w').write('0');os.write(1,b'2');os.read(0,1)"
)


@functools.cache  # thread-safe enough: a race makes two namespaces, both correct
def _root_user_namespace() -> int:
    """An fd of a user namespace mapping 0->0 and 65534->65534 (see the module docstring), made once per process."""
    holder = subprocess.Popen(
        [sys.executable, "-S", "-c", _USERNS_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={}
    )
    try:
        if holder.stdout.read(1) != b"1":
            raise SandboxUnavailableError(f"cannot create a user namespace; {_NO_USERNS}")
        for name in ("uid_map", "gid_map"):
            write_file(Path(f"/proc/{holder.pid}/{name}"), f"0 0 1\n{NOBODY} {NOBODY} 1\n")
        holder.stdin.write(b"x")
        holder.stdin.flush()
        if holder.stdout.read(1) != b"2":
            raise SandboxUnavailableError("cannot disable nested user namespaces in the sandbox's user namespace")
        return _above_stdio(os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC))
    finally:
        holder.kill()
        holder.communicate()


def _checked_files(files: dict[str, str | bytes]) -> dict[str, bytes]:
    out = {}
    for name, content in files.items():
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or path.parts in ((), (".",)):
            raise ValueError(f"sandbox file paths must be relative, without '..': {name!r}")
        out[str(path)] = content.encode() if isinstance(content, str) else bytes(content)
    if clash := {str(p) for name in out for p in PurePosixPath(name).parents} & set(out):
        raise ValueError(f"sandbox file paths used both as a file and as a directory: {sorted(clash)}")
    return out


def _memfd(content: bytes, stack: contextlib.ExitStack) -> int:
    fd = _above_stdio(os.memfd_create("rllm-sandbox-file", os.MFD_CLOEXEC))
    stack.callback(os.close, fd)
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@functools.cache
def _root_filesystem() -> tuple[str, ...]:
    """The read-only view of the host: /usr, /lib*, /bin, the ld.so files, and the Python installation."""
    argv = ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime"):
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    prefix, _ = host_python()
    if prefix != "/usr" and not prefix.startswith("/usr/"):
        for parent in reversed(PurePosixPath(prefix).parents[:-1]):  # e.g. /root, /root/.pyenv, traversable
            argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", prefix, prefix]
    site = f"{prefix}/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    if os.path.isdir(site):
        argv += ["--tmpfs", site, "--remount-ro", site]
    return tuple(argv)


# Classic BPF (linux/filter.h) over struct seccomp_data {int nr; u32 arch; ...}, and seccomp's return values.
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_NR_OFFSET, _ARCH_OFFSET = 0, 4
_ALLOW, _REFUSE, _KILL = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x80000000  # ALLOW, ERRNO(EPERM), KILL_PROCESS
# Per machine, every ABI a process on it can call the kernel with: (AUDIT_ARCH_*, the numbers of add_key,
# request_key and keyctl, the lowest number refused outright or None). x86-64 also takes i386 calls (int 0x80) and
# x32 calls (numbers with bit 30 set, none of which a Python or a libc of this machine makes): x32 is refused whole.
_KEY_SYSCALLS = {
    "x86_64": ((0xC000003E, (248, 249, 250), 0x40000000), (0x40000003, (286, 287, 288), None)),
    "aarch64": ((0xC00000B7, (217, 218, 219), None), (0x40000028, (309, 310, 311), None)),
}


@functools.cache
def _seccomp_filter() -> bytes:
    """The BPF program bwrap installs (--seccomp): refuse the keyring syscalls, allow everything else, and kill a
    process calling with an ABI the table does not know (its numbers would mean other calls)."""
    abis = _KEY_SYSCALLS.get(platform.machine())
    if abis is None:
        raise SandboxUnavailableError(
            f"rllm's sandbox has no seccomp filter for {platform.machine()!r} (only {', '.join(_KEY_SYSCALLS)}): "
            "without it sandboxed programs could use the host's kernel keyrings"
        )
    program = [(_LD_W_ABS, 0, 0, _ARCH_OFFSET)]
    for arch, numbers, refuse_from in abis:
        block = [(_LD_W_ABS, 0, 0, _NR_OFFSET)]
        checks = [(_JGE_K, refuse_from)] if refuse_from is not None else []
        checks += [(_JEQ_K, number) for number in numbers]
        for i, (op, k) in enumerate(checks):
            block.append((op, len(checks) - i, 0, k))  # true: jump over the rest and the ALLOW to the REFUSE
        block += [(_RET_K, 0, 0, _ALLOW), (_RET_K, 0, 0, _REFUSE)]
        program += [(_JEQ_K, 0, len(block), arch), *block]  # false: on to the next ABI's arch check
    program.append((_RET_K, 0, 0, _KILL))
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


@dataclass(frozen=True)
class _Layout:
    """What a run sees beyond the default layout: a writable repository, read-only host directories, more
    environment variables, and where it starts."""

    repo: RepoMount | None = None
    ro_binds: tuple[tuple[str, str], ...] = ()  # (host directory, path inside)
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = WORKDIR

    @staticmethod
    def of(repo=None, ro_binds=None, env=None, cwd=None) -> _Layout:
        binds = tuple((str(src), str(dest)) for src, dest in (ro_binds or {}).items())
        for src, dest in binds:
            parts = PurePosixPath(dest).parts
            if not os.path.isdir(src) or not PurePosixPath(dest).is_absolute() or len(parts) < 2 or ".." in parts:
                raise ValueError(f"ro_binds: {src!r} must be a host directory and {dest!r} an absolute path")
            if parts[1] in _SYSTEM_DIRS:
                raise ValueError(f"ro_binds: {dest!r} would shadow the sandbox's own {parts[1]!r} directory")
        clash = set(env or {}) & {"PATH", "HOME"}
        if clash:
            raise ValueError(f"env may not override {sorted(clash)}: the sandbox sets them")
        return _Layout(repo, binds, tuple((env or {}).items()), cwd or (repo.dest if repo else WORKDIR))


def _traversable_parents(path: str) -> list[str]:
    """bwrap makes missing parents of a mount point 0700 as root: make them 0755 so uid 65534 can reach it."""
    argv = []
    for parent in reversed(PurePosixPath(path).parents[:-1]):
        argv += ["--perms", "0755", "--dir", str(parent)]
    return argv


# Run by the sandbox's init with CAP_SYS_ADMIN, before the program drops to 65534: the repository overlay. $0 is
# where it goes; `cd "$PWD"` moves a working directory inside it from the empty mount point onto the overlay. Exit
# 125 with a marker on stderr is reported as an InfraError.
_MOUNT_OVERLAY = (
    f"mkdir -p {_UPPER}/upper {_UPPER}/work && chown {NOBODY}:{NOBODY} {_UPPER}/upper && mount -n -t overlay "
    f'rllm-repo -o lowerdir={_LOWER},upperdir={_UPPER}/upper,workdir={_UPPER}/work,userxattr "$0" && cd "$PWD" '
    '|| { echo "rllm-sandbox: cannot mount the repository overlay at $0" >&2; exit 125; }; exec "$@"'
)
# Run as the program's user: the repository copied onto the tmpfs at $0.
_COPY_REPO = (
    f'(cd {_LOWER} && find . -mindepth 1 -maxdepth 1 -exec cp -R -P --preserve=mode,timestamps,links -t "$0" {{}} +) '
    '|| { echo "rllm-sandbox: cannot copy the repository to $0" >&2; exit 125; }; exec "$@"'
)
_SETUP_FAILED = b"rllm-sandbox: "


def _bwrap_argv(
    tools: _Tools, limits: SandboxLimits, files: dict[str, int], status_fd: int, seccomp_fd: int, layout: _Layout
) -> list[str]:
    """bwrap's command line up to the program's argv; `files` maps paths under /work to memfds, `seccomp_fd` is a
    memfd holding `_seccomp_filter()` (bwrap reads it once and closes it)."""
    repo = layout.repo
    overlay = repo is not None and tools.setpriv is not None and not repo.copy  # as non-root: no caps to mount
    argv = [tools.bwrap, "--seccomp", str(seccomp_fd)]
    if tools.setpriv:
        argv += ["--userns", str(_USERNS_FD), "--unshare-pid", "--unshare-net", "--unshare-ipc"]
        argv += ["--unshare-uts", "--unshare-cgroup", "--cap-drop", "ALL"]
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]  # for setpriv
        if overlay:  # for the mount step only (setpriv drops them). The overlay does its copy-ups with the mounter's
            # credentials, and needs DAC_OVERRIDE for them; its layers are a read-only bind and our own tmpfs.
            argv += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_CHOWN", "--cap-add", "CAP_DAC_OVERRIDE"]
    else:
        argv += ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        argv += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    argv += ["--as-pid-1", "--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv"]
    for key, value in (*_SANDBOX_ENV.items(), *layout.env):
        argv += ["--setenv", key, value]
    argv += [*_root_filesystem(), "--proc", "/proc", "--dev", "/dev"]
    for writable in ("/tmp", WORKDIR, "/dev/shm"):  # /dev/shm: multiprocessing's semaphores
        argv += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", writable]
    for directory in sorted({str(p) for name in files for p in PurePosixPath(name).parents} - {"."}):
        argv += ["--perms", "1777", "--dir", f"{WORKDIR}/{directory}"]
    for name, fd in files.items():
        argv += ["--perms", "0644", "--file", str(fd), f"{WORKDIR}/{name}"]
    for src, dest in layout.ro_binds:
        argv += [*_traversable_parents(dest), "--ro-bind", src, dest]
    if repo is not None:
        argv += [*_traversable_parents(_LOWER), *_traversable_parents(repo.dest)]
        argv += ["--ro-bind", repo.source, _LOWER, "--perms", "1777", "--size", str(repo.size_mb << 20)]
        argv += ["--tmpfs", _UPPER, "--dir", repo.dest] if overlay else ["--tmpfs", repo.dest]
    # / and /dev are tmpfs without a size cap, writable by the program in the non-root layout: read-only
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", layout.cwd, "--json-status-fd", str(status_fd)]
    argv += ["/bin/sh", "-c", _INIT, "sandbox-init"]
    argv += ["/bin/sh", "-c", _MOUNT_OVERLAY, repo.dest] if overlay else []
    if tools.setpriv:  # after the init: as root, PID 1 is not the program's user, so the program cannot touch it
        argv += [tools.setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
    argv += ["/bin/sh", "-c", _COPY_REPO, repo.dest] if repo is not None and not overlay else []
    return argv


# ---- one run: the launcher, the I/O pump, the outcome ----


def _launcher(limits: SandboxLimits, cgroup: Cgroup | None, result_w: int, userns: int | None) -> str:
    """The bash script that starts a run: join the cgroup, set rlimits, put the result pipe on fd 3, exec argv. If
    any step fails it exits 125 and nothing of the run starts."""
    # With a cgroup, the address-space limit is only a backstop: threads reserve far more than they touch, and a
    # tight one would turn clean OOM kills ("memory") into MemoryErrors deep inside libraries.
    address_mb = max(4 * limits.memory_mb, limits.memory_mb + 1024) if cgroup else limits.memory_mb
    steps = [f"echo 0 >{shlex.quote(str(path))}" for path in (cgroup.join_files() if cgroup else [])]
    steps += [f"ulimit -S -t {limits.cpu_s}", f"ulimit -H -t {limits.cpu_s + 1}"]  # SIGXCPU first, SIGKILL 1 s later
    steps += [f"ulimit -c 0 -n {limits.open_files} -f {limits.tmpfs_mb << 10} -v {address_mb << 10}"]
    steps += [f"exec {RESULT_FD}>&{result_w} {result_w}>&-"]
    steps += [f"exec {_USERNS_FD}<&{userns} {userns}<&-"] if userns else []
    return " && ".join(steps) + ' && exec "$@"; exit 125'


@dataclass
class _Launch:
    command: list[str]  # what the launcher execs
    cwd: str
    env: dict[str, str]
    pass_fds: list[int]  # what the launcher inherits
    write_ends: list[int]  # of those, pipe ends to close here once it has them
    status_r: int | None = None  # bwrap's --json-status-fd
    userns: int | None = None  # as root: the user namespace bwrap joins


@dataclass
class _Spawned:
    proc: subprocess.Popen
    pidfd: int
    cgroup: Cgroup | None
    result_r: int
    status_r: int | None
    status: CappedBuffer  # what bwrap reported on status_r


def _pump(
    proc: subprocess.Popen, pidfd: int, sinks: dict[int, CappedBuffer], stdin: bytes, deadline: float
) -> str | None:
    """Feed stdin, drain the capped outputs and wait for the launcher's exit (its pidfd: no polling). Returns why the
    run must be killed ("timeout", "output_limit"), or None once all is done. The launcher is left unreaped, so its
    pid, our process group's id, stays reserved for the kill that follows."""
    with selectors.DefaultSelector() as selector:
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
                    selector.unregister(pidfd)
                elif data := os.read(key.fd, 1 << 16):
                    if not sinks[key.fd].add(data):
                        return "output_limit"
                else:
                    selector.unregister(key.fd)
    return None


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
        """Raise SandboxUnavailableError, naming the fix, unless sandboxed runs work on this machine: runs
        `python -S -c pass` through the whole path a real run takes."""
        probe = Sandbox(require_cgroup=require_cgroup)
        probe.unsafe = False  # check the real sandbox even when RLLM_SANDBOX_UNSAFE=1
        probe._tools, probe._use_cgroup = _find_tools(as_root=os.geteuid() == 0), require_cgroup
        try:
            result = probe._run([host_python()[1], "-S", "-c", "pass"], {}, b"", SandboxLimits(), _Layout())
        except InfraError as e:
            if any(sign in str(e) for sign in ("namespace", "uid map", "Operation not permitted")):
                raise SandboxUnavailableError(f"{_NO_USERNS}; {e}") from e
            raise SandboxUnavailableError(f"bubblewrap cannot start a sandbox here: {e}") from e
        if not result.ok:
            raise SandboxUnavailableError(f"the sandbox's Python does not start: {result}")

    def python_argv(self, script_path: str, *args: str) -> list[str]:
        """The host's Python, as seen inside. `-s -B` rather than `-I`: the environment inside is ours alone, and -I
        would ignore PYTHONHASHSEED=0 and drop the script's directory from sys.path (a harness importing a file)."""
        return [host_python()[1], "-s", "-B", script_path, *args]

    def run(
        self,
        argv: list[str],
        *,
        files: dict[str, str | bytes] | None = None,
        stdin: bytes = b"",
        limits: SandboxLimits | None = None,
        repo: RepoMount | None = None,
        ro_binds: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> SandboxResult:
        """Run argv in /work holding `files` (relative paths); waits while `max_workers` runs are in flight.
        `repo`: a host directory seen writable inside (`RepoMount`; the run starts in it); `ro_binds`: host
        directories seen read-only at the given paths; `env`: variables added to the sandbox's few."""
        checked = _checked_files(files or {})
        layout = _Layout.of(repo, ro_binds, env, cwd)
        self._ensure_ready()
        if self.unsafe and layout != _Layout():
            raise ValueError("repo, ro_binds, env and cwd need the bubblewrap sandbox, not Sandbox(unsafe=True)")
        with self._slots:
            return self._run(list(argv), checked, stdin, limits or self.limits, layout)

    def session(
        self,
        argv: list[str],
        *,
        files: dict[str, str | bytes] | None = None,
        limits: SandboxLimits | None = None,
        repo: RepoMount | None = None,
        ro_binds: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ):
        """Start argv as a long-lived program spoken to in JSON lines (`SandboxSession`): one sandbox that lives
        as long as an episode, as a container per episode does elsewhere. `limits.wall_s` bounds its whole life.
        Sessions take no `max_workers` slot: the caller bounds how many are open."""
        from rllm.sandbox.session import SandboxSession

        checked = _checked_files(files or {})
        layout = _Layout.of(repo, ro_binds, env, cwd)
        self._ensure_ready()
        if self.unsafe:
            raise ValueError("sandbox sessions need the bubblewrap sandbox, not Sandbox(unsafe=True)")
        return SandboxSession(self, list(argv), checked, limits or self.limits, layout)

    async def run_async(self, argv: list[str], **kwargs) -> SandboxResult:
        """`run` on this sandbox's own `max_workers` threads, so queued runs hold no thread of the event loop's
        default pool (which blocking environment steps need too)."""
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
                if self.require_cgroup or not str(e).startswith(NO_CGROUP):
                    raise
                self.check(require_cgroup=False)
            self._tools = _find_tools(as_root=os.geteuid() == 0)

    def _run(
        self, argv: list[str], files: dict[str, bytes], stdin: bytes, limits: SandboxLimits, layout: _Layout
    ) -> SandboxResult:
        start = time.monotonic()
        with contextlib.ExitStack() as stack:
            run = self._spawn(argv, files, limits, layout, stack)
            proc = run.proc
            out, err, result = (
                CappedBuffer(limits.output_bytes),
                CappedBuffer(limits.output_bytes),
                CappedBuffer(limits.result_bytes),
            )
            sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err, run.result_r: result}
            if run.status_r is not None:
                sinks[run.status_r] = run.status
            killed = _pump(proc, run.pidfd, sinks, stdin, start + limits.wall_s)
            init_pid = bwrap_status(run.status.value(), "child-pid") if killed else None
            kill_run(proc, run.pidfd, run.cgroup, init_pid)  # the launcher has exited or must die; its stragglers too
            exit_code, reason = self._outcome(proc.returncode, run.status.value(), killed, run.cgroup, err.value())
            return SandboxResult(exit_code, out.value(), err.value(), result.value(), reason, time.monotonic() - start)

    def _spawn(self, argv, files, limits: SandboxLimits, layout: _Layout, stack: contextlib.ExitStack) -> _Spawned:
        """Start the launcher; `stack` closes its pipes, kills whatever is left of it and removes its cgroup."""
        cgroup = Cgroup.create(limits.memory_mb, limits.pids + _BWRAP_PIDS) if self._use_cgroup else None
        if cgroup:
            stack.callback(cgroup.remove)
        launch = (
            self._unsafe_launch(argv, files, stack)
            if self.unsafe
            else self._bwrap_launch(argv, files, limits, layout, stack)
        )
        result_r, result_w = (_above_stdio(fd) for fd in os.pipe())
        stack.callback(os.close, result_r)
        try:
            proc = subprocess.Popen(
                [self._tools.bash, "-c", _launcher(limits, cgroup, result_w, launch.userns), "rllm", *launch.command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(result_w, *launch.pass_fds),
                env=launch.env,
                cwd=launch.cwd,
                start_new_session=True,
            )
        finally:
            for fd in (result_w, *launch.write_ends):
                os.close(fd)  # only the child holds them now: the pipes reach EOF when it is done
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stack.callback(stream.close)
        pidfd = os.pidfd_open(proc.pid)
        stack.callback(os.close, pidfd)
        stack.callback(lambda: proc.returncode is None and kill_run(proc, pidfd, cgroup, None))
        return _Spawned(proc, pidfd, cgroup, result_r, launch.status_r, CappedBuffer(1 << 16))

    def _outcome(self, returncode, status, killed, cgroup, stderr) -> tuple[int | None, str | None]:
        if killed:
            return None, killed
        if cgroup and cgroup.oom_killed():
            return signal_of(returncode)[0], "memory"
        code = returncode if self.unsafe else bwrap_status(status, "exit-code")
        if code is None:
            raise InfraError(f"the sandbox did not start (exit {returncode}): {stderr.decode(errors='replace')}")
        if code == 125 and stderr.rstrip().rsplit(b"\n", 1)[-1].startswith(_SETUP_FAILED):
            raise InfraError(f"the sandbox's set-up failed: {stderr.decode(errors='replace').strip()}")
        code, reason = signal_of(code)
        if code != 0 and cgroup and cgroup.pids_exhausted():
            reason = "pids"
        return code, reason

    def _bwrap_launch(self, argv, files, limits, layout, stack) -> _Launch:
        memfds = {name: _memfd(content, stack) for name, content in files.items()}
        seccomp = _memfd(_seccomp_filter(), stack)  # a fresh one per run: reading it moves its offset
        userns = _root_user_namespace() if self._tools.setpriv else None
        status_r, status_w = (_above_stdio(fd) for fd in os.pipe())
        stack.callback(os.close, status_r)
        command = [*_bwrap_argv(self._tools, limits, memfds, status_w, seccomp, layout), *argv]
        inherited = [status_w, seccomp, *memfds.values(), *([userns] if userns else [])]
        return _Launch(command, "/", {}, inherited, [status_w], status_r, userns)

    def _unsafe_launch(self, argv, files, stack) -> _Launch:
        cwd = stack.enter_context(tempfile.TemporaryDirectory(prefix="rllm-unsafe-"))
        for name, content in files.items():
            Path(cwd, name).parent.mkdir(parents=True, exist_ok=True)
            Path(cwd, name).write_bytes(content)
        return _Launch(argv, cwd, {**_SANDBOX_ENV, "HOME": cwd}, [], [])


_default: Sandbox | None = None
_default_lock = threading.Lock()


@contextlib.contextmanager
def bwrap_only_command(
    argv: list[str], limits: SandboxLimits | None = None
) -> Iterator[tuple[list[str], tuple[int, ...]]]:
    """For measuring what bwrap alone costs a run (benchmarks/sandbox_throughput.py): `argv` under bwrap with the
    sandbox's namespaces, mounts and seccomp filter, but no cgroup, rlimits or output pump; its result channel (fd 3)
    goes to /dev/null. Yields the command and the fds it needs: `subprocess.run(command, env={}, pass_fds=fds)`, as
    many times as wanted inside the `with` (each run reads the seccomp filter afresh from a file)."""
    tools = _find_tools(as_root=os.geteuid() == 0)
    with contextlib.ExitStack() as stack:
        read_end, write_end = (_above_stdio(fd) for fd in os.pipe())
        stack.callback(os.close, read_end)
        stack.callback(os.close, write_end)
        seccomp = stack.enter_context(tempfile.NamedTemporaryFile())
        seccomp.write(_seccomp_filter())
        seccomp.flush()
        command = [*_bwrap_argv(tools, limits or SandboxLimits(), {}, write_end, 5, _Layout()), *argv]
        shared = (_root_user_namespace(),) if tools.setpriv else ()
        userns = f"4<&{shared[0]}" if shared else ""  # as root, bwrap finds its user namespace on fd 4
        redirects = f"3>/dev/null {userns} 5<{shlex.quote(seccomp.name)}"
        yield [tools.bash, "-c", f'exec {redirects}; exec "$@"', "bwrap-only", *command], (write_end, *shared)


def default_sandbox() -> Sandbox:
    """The process-wide shared Sandbox (default limits, 2 workers), created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox()
        return _default

"""The sandbox against what model-written code may do: each attack is contained, the reason is reported, and the
host is unharmed afterwards. CI runs these as root, so the root-only traps (uid mapping, sysctls) are real here.

These tests fail rather than skip when the machine cannot sandbox (CI installs bubblewrap): the module fixture's
error is `Sandbox.check()`'s message, which names the fix."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rllm.errors import RllmError
from rllm.sandbox import Sandbox, SandboxLimits, SandboxResult, SandboxUnavailableError
from rllm.sandbox import _cgroup as cgroup_module
from rllm.sandbox import runner as sandbox_module
from tests.support.processes import processes_with

LIMITS = SandboxLimits(wall_s=5, cpu_s=5, memory_mb=192, pids=32, tmpfs_mb=16, output_bytes=256 << 10)


@pytest.fixture(scope="module", autouse=True)
def sandbox_works():
    Sandbox.check()


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(LIMITS)


def run_python(sandbox: Sandbox, code: str, *args: str, files: dict | None = None, **kwargs) -> SandboxResult:
    return sandbox.run(sandbox.python_argv("main.py", *args), files={"main.py": code, **(files or {})}, **kwargs)


def assert_host_fine(sandbox: Sandbox, marker: str | None = None) -> None:
    """A trivial run still works, no cgroup of ours is left, and no process of the attack survives."""
    follow_up = run_python(sandbox, "print('still fine')")
    assert follow_up.ok and follow_up.stdout == b"still fine\n", follow_up
    v1 = (cgroup_module.CGROUP_ROOT / "memory" / "cgroup.procs").exists()
    parents = cgroup_module._v1_parents() if v1 else [cgroup_module._v2_parent()]
    assert not [d for p in parents for d in p.glob(f"rllm-sandbox-{os.getpid()}-*")]
    if marker:
        assert processes_with(marker) == []


def test_runs_as_nobody_in_a_fresh_workdir(sandbox):
    code = "import os\nprint(os.getuid(), os.getgid(), os.getgroups(), os.getcwd(), sorted(os.listdir('.')))"
    res = run_python(sandbox, code, files={"data/input.txt": "x"})
    assert res.ok, res
    assert res.stdout.decode().split(maxsplit=3) == ["65534", "65534", "[]", "/work ['data', 'main.py']\n"]


def test_result_channel_is_separate_from_stdout(sandbox):
    res = run_python(sandbox, "import os\nprint('to stdout')\nos.write(3, b'to result')")
    assert res.ok and res.stdout == b"to stdout\n" and res.result == b"to result"


def test_only_stdio_and_the_result_pipe_are_open_inside(sandbox):
    """No fd of the host (the root user namespace, file copies, status pipe) leaks in, and the sandbox's PID 1 keeps
    no copy of the result pipe that the program could reach through /proc/1/fd (as root, PID 1 is not even the
    program's user)."""
    code = """
import os
print(sorted(int(fd) for fd in os.listdir("/proc/self/fd")))
try:
    print(sorted(int(fd) for fd in os.listdir("/proc/1/fd")))
except PermissionError:
    print("out of reach")
"""
    res = run_python(sandbox, code, files={"data.txt": "x"})
    assert res.ok, res
    mine, pid1 = res.stdout.decode().splitlines()
    assert mine == "[0, 1, 2, 3, 4]"  # 4: listdir's own
    assert pid1 == ("out of reach" if os.geteuid() == 0 else "[0]")  # 0: /dev/null


def test_stdin_and_files_reach_the_program(sandbox):
    code = "import sys\nfrom helper import VALUE\nprint(VALUE, sys.stdin.read())"
    res = sandbox.run(sandbox.python_argv("main.py"), files={"main.py": code, "helper.py": "VALUE = 7"}, stdin=b"in")
    assert res.ok and res.stdout == b"7 in\n", res


def test_fork_bomb_is_stopped_by_the_pid_limit(sandbox):
    marker = f"forkbomb-{uuid.uuid4()}"
    res = run_python(sandbox, "import os\nwhile True:\n    os.fork()", marker)
    assert res.killed_reason in ("pids", "timeout"), res
    assert not res.ok
    assert_host_fine(sandbox, marker)


def test_memory_hog_is_oom_killed(sandbox):
    res = run_python(sandbox, "chunks = []\nfor _ in range(128):\n    chunks.append(b'x' * (16 << 20))")
    assert res.killed_reason == "memory", res
    assert res.duration_s < LIMITS.wall_s
    one_big = run_python(sandbox, "x = b'x' * (2 << 30)")
    assert one_big.killed_reason == "memory" or b"MemoryError" in one_big.stderr, one_big
    assert_host_fine(sandbox)


def test_disk_filler_hits_the_tmpfs_caps(sandbox):
    name = f"fill-{uuid.uuid4()}"
    code = f"""
import errno
for where in ("/work", "/tmp", "/dev/shm"):
    try:
        with open(f"{{where}}/{name}", "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
                f.flush()
    except OSError as e:
        print(where, errno.errorcode[e.errno])
"""
    free_before = shutil.disk_usage("/").free
    res = run_python(sandbox, code)
    assert res.ok, res
    lines = res.stdout.decode().split("\n")
    assert [line.split()[0] for line in lines if line] == ["/work", "/tmp", "/dev/shm"]
    assert all(line.split()[1] in ("ENOSPC", "EFBIG") for line in lines if line), res.stdout
    assert not Path("/tmp", name).exists() and not Path("/work", name).exists()
    assert free_before - shutil.disk_usage("/").free < 16 << 20  # other jobs may write a little meanwhile
    assert_host_fine(sandbox)


def test_huge_print_is_cut_at_the_output_cap(sandbox):
    res = run_python(sandbox, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)")
    assert res.killed_reason == "output_limit", res
    assert len(res.stdout) == LIMITS.output_bytes
    assert res.duration_s < 3
    assert_host_fine(sandbox)


def test_network_cannot_reach_a_host_listener(sandbox):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        code = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=1)
    print("CONNECTED")
except OSError as e:
    print("failed", type(e).__name__)
"""
        res = run_python(sandbox, code)
        with pytest.raises(TimeoutError):
            server.accept()
    assert res.ok and res.stdout.startswith(b"failed"), res


def test_host_secrets_are_not_in_the_sandbox_environment(sandbox, monkeypatch):
    sentinel = f"sentinel-{uuid.uuid4()}"
    monkeypatch.setenv("RLLM_TEST_SECRET", sentinel)
    code = """
import glob, os
print(dict(os.environ))
for path in ["/proc/self/environ", "/proc/1/environ", *glob.glob("/proc/*/environ")]:
    try:
        print(path, open(path, "rb").read())
    except OSError as e:
        print(path, e)
"""
    res = run_python(sandbox, code)
    assert res.ok and b"'PATH'" in res.stdout, res
    assert sentinel.encode() not in res.stdout + res.stderr


# add_key(2) and keyctl(2) of this machine's ABI, which the sandbox's Python shares
KEY_SYSCALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}
KEYCTL_SEARCH, KEYCTL_READ, KEYCTL_INVALIDATE, SESSION_KEYRING, USER_KEYRING = 10, 11, 21, -3, -4
KEYRING_HELPERS = f"""
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, KEYCTL = {KEY_SYSCALLS}[platform.machine()]
def keyctl(*args):
    return libc.syscall(KEYCTL, *args), ctypes.get_errno()
def add_key(description, payload, keyring):
    return libc.syscall(ADD_KEY, b"user", description, payload, len(payload), keyring), ctypes.get_errno()
def read_key(serial):
    buf = ctypes.create_string_buffer(4096)
    size, errno = keyctl({KEYCTL_READ}, serial, buf, len(buf))
    return buf.raw[:size].decode() if size >= 0 else f"errno {{errno}}"
def search(keyring, description):
    return keyctl({KEYCTL_SEARCH}, keyring, b"user", description, 0)
"""


@pytest.fixture
def host_key():
    """A secret in this process's session keyring, which a plain fork/exec hands down to every child."""
    if platform.machine() not in KEY_SYSCALLS:
        pytest.skip(f"no keyctl numbers for {platform.machine()} in this test")
    libc = ctypes.CDLL(None, use_errno=True)
    add_key, keyctl = KEY_SYSCALLS[platform.machine()]
    secret = f"host-secret-{uuid.uuid4().hex}".encode()
    serial = libc.syscall(add_key, b"user", b"rllm-test-secret", secret, len(secret), SESSION_KEYRING)
    if serial < 0:
        pytest.skip(f"this host cannot add keys to its session keyring (errno {ctypes.get_errno()})")
    yield serial, secret
    libc.syscall(keyctl, KEYCTL_INVALIDATE, serial)


def test_the_hosts_session_keyring_is_out_of_reach(sandbox, host_key):
    serial, secret = host_key
    code = (
        KEYRING_HELPERS
        + f"""
print("by id", read_key({serial}))
found, errno = search({SESSION_KEYRING}, b"rllm-test-secret")
print("by search", read_key(found) if found > 0 else f"errno {{errno}}")
if platform.machine() == "x86_64":  # the same call through the i386 ABI, which a filter on x86-64 numbers misses
    import mmap, os
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(bytes.fromhex("53" "b820010000" "31db" "b9fdffffff" "31d2" "cd80" "5b" "c3"))
    # push rbx; eax = 288 (keyctl); ebx = 0 (KEYCTL_GET_KEYRING_ID); ecx = -3 (session); edx = 0; int 0x80; pop rbx
    call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    r, w = os.pipe()
    if os.fork() == 0:  # a kernel without i386 emulation kills the caller of int 0x80
        os.write(w, str(call()).encode())
        os._exit(0)
    os.close(w)
    os.wait()
    print("i386 session keyring", os.read(r, 64).decode() or "unavailable")
"""
    )
    res = run_python(sandbox, code)
    assert res.ok, res
    assert secret not in res.stdout and b"by id errno" in res.stdout and b"by search errno" in res.stdout, res.stdout
    if platform.machine() == "x86_64":
        i386 = res.stdout.decode().splitlines()[-1]
        assert i386 in (f"i386 session keyring {-errno.EPERM}", "i386 session keyring unavailable"), res.stdout


def test_keys_added_by_one_run_are_gone_in_the_next(sandbox, host_key):
    """Both the session keyring (the host's, inherited) and the user keyring of uid 65534 (per user namespace, and as
    root the sandbox's user namespace lives as long as the trainer) would carry keys from one run to the next."""
    name = f"rllm-persist-{uuid.uuid4().hex}".encode()
    rings = f"{{'session': {SESSION_KEYRING}, 'user': {USER_KEYRING}}}"
    plant = KEYRING_HELPERS + f"for ring in {rings}.values():\n    add_key({name!r}, b'x', ring)\n"
    look = KEYRING_HELPERS + f"print([n for n, ring in {rings}.items() if search(ring, {name!r})[0] > 0])\n"
    assert run_python(sandbox, plant).ok
    res = run_python(sandbox, look)
    assert res.ok and res.stdout == b"[]\n", res  # the keyrings where the next run finds the planted key
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(KEY_SYSCALLS[platform.machine()][1], KEYCTL_SEARCH, SESSION_KEYRING, b"user", name, 0) < 0


def test_killing_every_visible_pid_harms_only_the_sandbox(sandbox):
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        code = """
import os
for pid in sorted(os.listdir("/proc"), key=lambda p: p == str(os.getpid())):
    if pid.isdigit():
        try:
            os.kill(int(pid), 9)
        except OSError as e:
            print(pid, e, flush=True)
"""
        res = run_python(sandbox, code)
        assert res.killed_reason == "signal:SIGKILL" and res.exit_code == -9, res
        assert res.stderr == b"", res  # nothing but the program writes there
        assert bystander.poll() is None
        os.kill(os.getpid(), 0)
        assert_host_fine(sandbox)
    finally:
        bystander.kill()
        bystander.wait()


def test_writes_outside_the_sandbox_fail(sandbox):
    name = f"rllm_pwned_{uuid.uuid4().hex}"
    prefix = os.path.realpath(sys.base_prefix)
    site = f"{prefix}/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    targets = ["/etc", "/work/main", str(Path.home()), prefix, site, "/usr", "/", "/dev", "/proc"]
    code = f"""
import sys
for directory in sys.argv[1:]:
    try:
        open(directory + "/{name}", "w").write("pwned")
        print("WROTE", directory)
    except OSError as e:
        print("failed", directory, type(e).__name__)
"""
    res = run_python(sandbox, code, *targets)
    assert res.ok, res
    assert b"WROTE" not in res.stdout and res.stdout.count(b"failed") == len(targets), res.stdout
    assert not [t for t in targets if Path(t, name).exists()]


def test_host_sysctls_are_read_only_even_when_run_as_root(sandbox):
    code = """
value = open("/proc/sys/kernel/printk_ratelimit").read()
try:
    open("/proc/sys/kernel/printk_ratelimit", "w").write(value)
    print("WROTE")
except OSError as e:
    print("failed", type(e).__name__)
"""
    res = run_python(sandbox, code)
    assert res.ok and res.stdout.startswith(b"failed"), res


def test_busy_loop_times_out(sandbox):
    res = run_python(sandbox, "while True:\n    pass", limits=SandboxLimits(wall_s=1))
    assert res.killed_reason == "timeout" and res.exit_code is None, res
    assert res.duration_s < 2
    assert_host_fine(sandbox)


def test_timeout_kills_a_child_in_its_own_session(sandbox):
    marker = f"sleeper-{uuid.uuid4()}"
    code = "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\ntime.sleep(100)"
    res = run_python(sandbox, code, marker, limits=SandboxLimits(wall_s=1))
    assert res.killed_reason == "timeout" and res.duration_s < 2, res
    assert_host_fine(sandbox, marker)


def test_a_daemon_left_behind_dies_with_the_program(sandbox):
    marker = f"daemon-{uuid.uuid4()}"
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\nprint('parent done')"
    res = run_python(sandbox, code, marker)
    assert res.ok and res.duration_s < 2, res
    assert_host_fine(sandbox, marker)


def test_killed_runs_leave_no_orphans_to_pid_1():
    """A killed run must not hand bwrap's init to PID 1: a trainer that is a container's PID 1 would never reap it.
    A child subreaper stands in for that PID 1 and collects whatever is orphaned to it."""
    script = """
import ctypes, os
from rllm.sandbox import Sandbox, SandboxLimits
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
sandbox = Sandbox(SandboxLimits(wall_s=0.5))
codes = ["while True: pass", "import sys\\nwhile True: sys.stdout.write('x' * 65536)"] * 3
reasons = sorted({sandbox.run(sandbox.python_argv("-c", code)).killed_reason for code in codes})
orphans = []
try:
    while pid := os.waitpid(-1, os.WNOHANG)[0]:
        orphans.append(pid)
except ChildProcessError:
    pass
print(reasons, orphans)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "['output_limit', 'timeout'] []"


def test_fails_closed_without_bubblewrap(monkeypatch):
    monkeypatch.setattr(sandbox_module, "BWRAP", "/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        Sandbox.check()
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        Sandbox().run(["true"])
    assert issubclass(SandboxUnavailableError, RllmError)
    unsafe = Sandbox(unsafe=True)
    with pytest.warns(RuntimeWarning, match="unsafe"):
        res = unsafe.run(unsafe.python_argv("main.py"), files={"main.py": "print(1)"})
    assert res.ok and res.stdout == b"1\n"
    monkeypatch.setenv("RLLM_SANDBOX_UNSAFE", "1")
    assert Sandbox().unsafe
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        Sandbox.check()  # the opt-in relaxes runs, never the check


def test_fails_closed_on_a_machine_it_has_no_seccomp_filter_for(monkeypatch):
    sandbox_module._seccomp_filter.cache_clear()
    monkeypatch.setattr(sandbox_module.platform, "machine", lambda: "riscv64")
    try:
        with pytest.raises(SandboxUnavailableError, match="no seccomp filter for 'riscv64'"):
            Sandbox.check()
    finally:
        sandbox_module._seccomp_filter.cache_clear()


def test_fails_closed_without_a_cgroup_unless_allowed(monkeypatch, tmp_path):
    monkeypatch.setattr(cgroup_module, "CGROUP_ROOT", tmp_path)
    with pytest.raises(SandboxUnavailableError, match="no writable cgroup"):
        Sandbox().run(["true"])
    degraded = Sandbox(LIMITS, require_cgroup=False)
    res = run_python(degraded, "print(1)")
    assert res.ok and res.stdout == b"1\n"


def test_file_paths_must_stay_inside_the_workdir(sandbox):
    for bad in ("../escape.py", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="relative"):
            sandbox.run(["true"], files={bad: "x"})


def test_max_workers_bounds_concurrency():
    bounded = Sandbox(LIMITS, max_workers=2)
    code = "import os, time\nstart = time.time()\ntime.sleep(0.5)\nos.write(3, f'{start} {time.time()}'.encode())"

    async def four_at_once():
        return await asyncio.gather(*(bounded.run_async(bounded.python_argv("-c", code)) for _ in range(4)))

    started = time.monotonic()
    results = asyncio.run(four_at_once())
    assert time.monotonic() - started >= 0.9
    intervals = [tuple(map(float, r.result.split())) for r in results]
    assert all(r.ok for r in results), results
    most = max(sum(s <= t < e for s, e in intervals) for t, _ in intervals)
    assert most == 2, intervals

"""How many CPU cores this process may really use, and how many compute threads torch should run on them.

`usable_cores()` is the one answer to "how many cores": the CPUs this process may run on (`os.sched_getaffinity`,
e.g. `taskset` or a container's cpuset) capped by its cgroup's CPU quota (cgroup v2 `cpu.max`, v1
`cpu.cfs_quota_us / cpu.cfs_period_us`, the tightest along the cgroup's ancestors), rounded up (a 1.5-core quota
runs 2 threads). `os.cpu_count()` counts the host's CPUs and is wrong in both cases. Every place that sizes a pool
of compute threads or processes uses it.

`ThreadGovernor` (one per process, `governor()`) turns it into torch's intra-op thread count while work runs: the
cores other processes leave free, shared between this process's busy compute threads. This module imports nothing
heavy (no torch): `rllm.inference.model` (the worker's decode steps) and `rllm.training.backends.torch_model` (each
micro-batch's forward and backward) apply what it decides, where `rllm.runtime` enables `thread_governor` (the CLI
does; a library's user opts in): torch's thread count is the whole program's business, so without that rllm leaves
it as torch or the program set it.

A training run does not follow the load: what its float results depend on stays fixed for the run, and the thread
count is such a thing (the local model's decode steps and sums over more than 32k elements split their work between
threads, and moved in the last bits when the count changed: 0 of 13 kill-and-resume write points reproduced the
uninterrupted run bitwise with the governor, 13 of 13 with 2 fixed threads). So `rllm.training.numerics` picks one
count when a run starts (`run_threads`), records it in the run directory, reuses it on `--resume`, and holds every
compute thread at it (`hold_threads`): the governor adapts nothing during training. Nothing else could adapt: torch's
inter-op pool is sized once, before the first parallel work (`set_num_interop_threads` is refused after it), and an
eager forward or backward on a CPU does not use it. `rllm eval` and `rllm serve` keep the governor.

One thread computes. torch's OpenMP (libgomp) keeps a team of worker threads for each thread that ran parallel work,
until that thread exits, and once a process holds more such threads than it has cores, libgomp's idle workers spin
only ~100 times before they sleep, so every parallel operator then waits for its team to wake (~80 us for a
multiply of 0.2M floats on a 2-core Xeon VM, against 15 us with one team). An update on the main thread beside a
`LocalModel`'s worker took 6.4 s, on the worker itself 3.9 s, and the decode steps sped up alike. So where rllm owns
the threads it computes on one: a synchronous training step's update runs on the rollout model's worker
(`LocalModel.call_on_worker`), and models are loaded in a thread that exits afterwards (`in_passing_thread`), which
takes its team with it, so the main thread never holds one.

`cpu_model()` and `cpu_extensions()` name the machine: its model and the vector and matrix extensions the kernels
depend on (avx2, avx512f, avx512_bf16, amx_bf16, amx_tile). Benchmarks print both, and the packed linears' choice of
kernel is cached per model and extensions (`rllm.inference.kernels`): an AMD EPYC and an Intel Xeon with the same
torch choose differently.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rllm import runtime

__all__ = [
    "OthersLoad",
    "ThreadGovernor",
    "cgroup_quota_cores",
    "cpu_extensions",
    "cpu_model",
    "describe_cpu",
    "governor",
    "held_threads",
    "hold_threads",
    "in_passing_thread",
    "run_threads",
    "set_torch_threads",
    "threads_for",
    "usable_cores",
    "user_threads",
]

T = TypeVar("T")

_PROC_CGROUP = Path("/proc/self/cgroup")
_PROC_CPUINFO = Path("/proc/cpuinfo")
# The vector and matrix extensions torch's CPU kernels (MKL, oneDNN) choose their code by, in /proc/cpuinfo's spelling.
KERNEL_EXTENSIONS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_model(*, cpuinfo: Path = _PROC_CPUINFO) -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; elsewhere what `platform` knows)."""
    return _cpuinfo_field("model name", cpuinfo) or platform.processor() or platform.machine()


def cpu_extensions(*, cpuinfo: Path = _PROC_CPUINFO) -> tuple[str, ...]:
    """Which of `KERNEL_EXTENSIONS` the CPU has, in that order (none where /proc/cpuinfo cannot be read)."""
    flags = set((_cpuinfo_field("flags", cpuinfo) or "").split())
    return tuple(extension for extension in KERNEL_EXTENSIONS if extension in flags)


def describe_cpu(*, cpuinfo: Path = _PROC_CPUINFO) -> str:
    """The model and its extensions in one phrase, as benchmarks print it: "AMD EPYC 7B13 (avx2)"."""
    return f"{cpu_model(cpuinfo=cpuinfo)} ({', '.join(cpu_extensions(cpuinfo=cpuinfo)) or 'no avx2'})"


def _cpuinfo_field(name: str, cpuinfo: Path) -> str | None:
    """The first processor's `name` field in /proc/cpuinfo."""
    try:
        with open(cpuinfo, encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def usable_cores(*, proc_cgroup: Path = _PROC_CGROUP, cgroup_root: Path = _CGROUP_ROOT) -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup's CPU quota (rounded up), at least 1."""
    cores = _affinity_cores()
    quota = cgroup_quota_cores(proc_cgroup=proc_cgroup, cgroup_root=cgroup_root)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota - 1e-9)))
    return max(1, cores)


def _affinity_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cgroup_quota_cores(*, proc_cgroup: Path = _PROC_CGROUP, cgroup_root: Path = _CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (quota / period; the tightest of the cgroup and its
    ancestors), or None when there is none or it cannot be read. `proc_cgroup` is `/proc/self/cgroup`;
    `cgroup_root` where the cgroup file systems are mounted (both parameters exist for tests)."""
    try:
        lines = proc_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":  # cgroup v2: one unified hierarchy
            quotas += _quotas_along(cgroup_root, path, _v2_quota)
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own hierarchy
            quotas += _quotas_along(_v1_cpu_mount(cgroup_root, controllers), path, _v1_quota)
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


def _quotas_along(mount: Path, path: str, read_quota) -> list[float | None]:
    """The quota of the cgroup at `path` under `mount` and of each ancestor up to the mount. Inside a container
    the path may name the host's hierarchy, which the container's mount does not have: then the mount's root is
    the container's own cgroup."""
    directory = mount / path.strip("/")
    if not directory.is_dir():
        directory = mount
    quotas = []
    while True:
        quotas.append(read_quota(directory))
        if directory == mount or mount not in directory.parents:
            return quotas
        directory = directory.parent


def _v2_quota(directory: Path) -> float | None:
    """`cpu.max` holds "<quota> <period>" in microseconds, quota "max" for none."""
    try:
        fields = (directory / "cpu.max").read_text(encoding="utf-8").split()
    except OSError:
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_quota(directory: Path) -> float | None:
    """`cpu.cfs_quota_us` (-1 for none) over `cpu.cfs_period_us`."""
    try:
        quota = (directory / "cpu.cfs_quota_us").read_text(encoding="utf-8").strip()
        period = (directory / "cpu.cfs_period_us").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:
        return None
    return quota_us / period_us


def _v1_cpu_mount(cgroup_root: Path, controllers: str) -> Path:
    """Where the v1 cpu controller is mounted: `cpu,cpuacct` (as listed) or its `cpu` alias."""
    for name in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
        if (cgroup_root / name).is_dir():
            return cgroup_root / name
    return cgroup_root / "cpu"


# ------------------------------------------------------------ torch's thread count on a shared machine


def threads_for(cores: int, others_busy: float, busy_compute_threads: int = 1, cpus: int | None = None) -> int:
    """Intra-op threads for one of this process's compute threads: the cores other processes leave free on the
    `cpus` this process may run on (default `cores`; more under a CPU quota: a container with 4 cores of quota on a
    64-CPU host is not short of cores because other containers use 30), rounded to the nearest core, at most
    `cores`, shared among the compute threads this process runs at once, at least 1."""
    free = (cpus or cores) - others_busy
    return max(1, min(cores, math.floor(free + 0.5)) // max(1, busy_compute_threads))


class OthersLoad:
    """The CPU time that OTHER processes used on this process's CPUs between two readings, in cores: the busy ticks
    of those CPUs in `/proc/stat` minus this process's own CPU time. What they got, not what they wanted: while we
    run N threads on N cores, two busy neighbours show as about one core, which is still enough to see them.
    Where `/proc/stat` cannot be read (not Linux), `reading()` is None."""

    def __init__(self, stat_path: Path = Path("/proc/stat")) -> None:
        self.stat_path = stat_path
        self.cpus = {f"cpu{cpu}" for cpu in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else set()
        self.ticks_per_second = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._snapshot()

    def reading(self) -> tuple[float, float | None]:
        """(seconds since the last reading, the cores others used in them or None), and start a new interval."""
        now = self._snapshot()
        last, self._last = self._last, now
        seconds = now[0] - last[0]
        if now[1] is None or last[1] is None or seconds <= 0:
            return seconds, None
        others = (now[1] - last[1]) / self.ticks_per_second - (now[2] - last[2])
        return seconds, max(0.0, others / seconds)

    def _snapshot(self) -> tuple[float, float | None, float]:
        return time.monotonic(), self._busy_ticks(), time.process_time()

    def _busy_ticks(self) -> float | None:
        try:
            with open(self.stat_path, encoding="ascii") as stat:
                lines = [line.split() for line in stat if line.startswith("cpu")]
        except OSError:
            return None
        busy = 0
        for fields in lines:
            if fields[0] in self.cpus and len(fields) >= 8:
                ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
                busy += sum(ticks) - ticks[3] - ticks[4]
        return busy if lines else None


class ThreadGovernor:
    """Chooses torch's intra-op thread count for this process's compute threads (the local model's worker, the
    trainer), from the cores this process may use (`usable_cores`), what other processes use of them
    (`OthersLoad`, re-read at most every `interval` seconds) and how many compute threads of ours are busy at once
    (`computing()`; when generation and training overlap, they share the free cores). `OMP_NUM_THREADS` in the
    environment fixes the count (the user's choice wins).

    Why (measured on 2 cores, torch 2.13's GNU OpenMP; `benchmarks/busy_machine.py`): Linux shares a contended CPU
    fairly between sessions (autogroups) and cgroups, not between threads, so two busy processes started elsewhere
    leave this process about 2/3 of a core however many threads it runs. Torch's OpenMP threads meet at a barrier
    after every operator: with two threads each operator waits for the one the scheduler has just put aside.
    Generation + a GRPO update of SmolLM2-135M took 2.3-2.5x as long with 2 threads as with 1 beside two busy
    processes (1.2-2.0x in the benchmark's runs, with other work on the machine too); the first prefill of an eval
    at 2 threads alone took 15 s where the 1-thread decode steps after it took 0.2 s. On an idle machine 2 threads
    are faster. Hence as many threads as there are cores others leave free, re-decided while the work runs. Not
    chosen: `OMP_WAIT_POLICY=passive` (waiting threads sleep instead of spinning: 2 threads then took 1.13x as long
    as 1 beside the two busy processes, not 2.3x; still behind, it must be set before torch loads, and what it costs
    an idle machine could not be measured on this shared one), and the load average (it counts our own threads
    and lags by a minute).

    Limits: other processes in this process's own session or cgroup (its sandboxes) share the CPU with it thread
    by thread, so there more threads would buy more CPU; they count as others all the same. Float results may depend on
    the count: SmolLM2-135M's forward and backward gave bitwise the same logits and gradients with 1 and 2 threads,
    but the local model's decode steps (16-row matrix products) did not, nor does a full reduction over more than
    32k elements, which is split between threads (on a 2-core Intel Xeon since: the same logits and decode steps,
    other gradients). So a training run holds one count instead (`hold_threads`, module
    docstring); anything else that must repeat bitwise on a machine whose load changes sets `OMP_NUM_THREADS` (or
    calls `torch.set_num_threads`, which `user_threads` respects)."""

    def __init__(
        self,
        *,
        cores: int | None = None,
        load: OthersLoad | None = None,
        interval: float = 0.5,
        fixed: int | None = None,
    ) -> None:
        self.cores = cores or usable_cores()
        self.fixed = fixed if fixed is not None else _env_threads()
        self.interval = interval
        self._load = load or OthersLoad()
        self._cpus = len(getattr(self._load, "cpus", ())) or None  # the CPUs whose load it reads
        self._others = 0.0
        self._read_at = time.monotonic()
        self._has_read = False
        self._busy: dict[int, int] = {}  # compute thread -> depth of its `computing()` sections
        self._lock = threading.Lock()

    def threads(self) -> int:
        """The threads a compute thread should use now; cheap (a load reading at most every `interval` seconds), so
        call it before each unit of work (a decode step, a micro-batch)."""
        if self.fixed:
            return self.fixed
        with self._lock:
            now = time.monotonic()
            if not self._has_read:  # the first decision is the one a short phase (an eval) keeps: measure it
                time.sleep(max(0.0, self._read_at + _FIRST_WINDOW_S - now))
                now = time.monotonic()
            if now - self._read_at >= self.interval or not self._has_read:
                self._read_at, self._has_read = now, True
                others = self._load.reading()[1]
                if others is not None:
                    self._others = others
            return threads_for(self.cores, self._others, len(self._busy), cpus=self._cpus)

    @contextlib.contextmanager
    def computing(self) -> Iterator[None]:
        """The calling thread computes inside this block: the free cores are shared with the other busy ones."""
        self.set_busy(True)
        try:
            yield
        finally:
            self.set_busy(False)

    def set_busy(self, busy: bool) -> None:
        """Mark the calling thread busy (nested: each True needs its False) or idle."""
        ident = threading.get_ident()
        with self._lock:
            depth = self._busy.get(ident, 0) + (1 if busy else -1)
            if depth > 0:
                self._busy[ident] = depth
            else:
                self._busy.pop(ident, None)


# A first reading over less would be a few ticks of /proc/stat (10 ms each): measured, one prefill at 2 threads
# beside two busy processes took 15 s where the 1-thread steps after it took 0.2 s each.
_FIRST_WINDOW_S = 0.1
_GOVERNOR: ThreadGovernor | None = None
_GOVERNOR_LOCK = threading.Lock()
_TORCH_DEFAULT: int | None = None  # torch.get_num_threads() when rllm's torch modules loaded
_CHOSEN = threading.local()  # .count: what set_torch_threads last set on this thread
_HELD: int | None = None  # a training run's count (hold_threads): every compute thread runs it, the governor idle


def governor(torch_default: int | None = None) -> ThreadGovernor:
    """The process's one `ThreadGovernor`, created on first use: its first load reading spans what happened since
    (model loading included), so the modules that run torch create it when they load. `torch_default` (their
    `torch.get_num_threads()` then) caps the count: torch's own default, physical cores on an SMT machine or a
    count the program set before, is never exceeded."""
    global _GOVERNOR, _TORCH_DEFAULT
    with _GOVERNOR_LOCK:
        if _GOVERNOR is None:
            cores = usable_cores()
            _GOVERNOR = ThreadGovernor(cores=min(cores, torch_default) if torch_default else cores)
            _TORCH_DEFAULT = torch_default
        return _GOVERNOR


def user_threads(current: int) -> int | None:
    """`current` (the calling thread's `torch.get_num_threads()`) when the program set it itself
    (`torch.set_num_threads` after rllm's torch modules loaded, e.g. to keep float reductions in one order), else
    None: rllm then leaves that thread's count alone."""
    if _TORCH_DEFAULT is None or current == _TORCH_DEFAULT or current == getattr(_CHOSEN, "count", None):
        return None
    return current


def run_threads(given: int | None, current: int) -> int:
    """The intra-op thread count a training run holds from start to end: `given` (`inference.num_threads`), else a
    count the program set itself (`user_threads(current)`, `current` being `torch.get_num_threads()`), else
    `OMP_NUM_THREADS`, else every usable core (at most torch's own default, as the governor caps it). The machine's
    load does not enter: the same machine gives the same count, busy or idle."""
    return given or user_threads(current) or _env_threads() or governor(current).cores


def hold_threads(count: int | None) -> None:
    """Hold torch's intra-op threads at `count` on every compute thread (a training run's, `run_threads`), on the
    calling thread at once and on each other one at its next `set_torch_threads()` or `LocalModel` start, whatever
    the governor or `rllm.runtime` would choose; None lets go (the counts set stay as they are)."""
    global _HELD
    _HELD = count
    if count is not None:
        set_torch_threads(count)


def held_threads() -> int | None:
    """The count `hold_threads` holds, or None."""
    return _HELD


def set_torch_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads on the CALLING thread (with OpenMP the count is per thread) to `threads`, else to
    the count a training run holds (`hold_threads`), else to the governor's choice unless the program set this
    thread's count itself (`user_threads`) or `rllm.runtime` does not enable `thread_governor`; returns the count.
    Only callers that already imported torch call this."""
    import torch

    threads = threads or _HELD
    current = torch.get_num_threads()
    if threads is None and (not runtime.options().thread_governor or user_threads(current) is not None):
        return current
    count = threads or governor().threads()
    if current != count:
        torch.set_num_threads(count)
    _CHOSEN.count = count
    return count


def _env_threads() -> int | None:
    try:
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    except (KeyError, ValueError):
        return None


def in_passing_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on a new thread that exits when it returns (its result returned, its exception raised
    here): the OpenMP team its parallel work starts goes with the thread (module docstring). For loading a model,
    whose tensor copies are parallel work, so that the calling thread (the main one) starts no team of its own."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # raised again in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name=f"rllm-{getattr(fn, '__name__', 'load')}", daemon=True)
    thread.start()
    thread.join()  # a signal's handler still runs in the main thread meanwhile
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]

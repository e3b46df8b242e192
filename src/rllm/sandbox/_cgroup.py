"""Per-run cgroups for the sandbox (`rllm.sandbox.runner`): memory (no swap) and pids limits, OOM and pid-limit
detection, kill and removal. cgroup v1 has a directory per controller (pids, memory), v2 one directory; a cgroup
left by a crashed host process is swept on the next run."""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import signal
import time
import warnings
from pathlib import Path

from rllm.errors import SandboxUnavailableError

__all__ = ["CGROUP_ROOT", "NO_CGROUP", "Cgroup", "write_file"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
NO_CGROUP = (
    "no writable cgroup (v1 pids+memory or v2 memory+pids) for per-run limits: run as root, or delegate a cgroup v2 "
    "subtree (systemd-run --user -p Delegate=yes ...) and set RLLM_SANDBOX_CGROUP to it, or pass "
    "Sandbox(require_cgroup=False) to rely on rlimits only"
)


def write_file(path: Path, value: object) -> None:
    path.write_text(str(value))


def _counter(path: Path, key: str) -> int:
    """A `key value` line of a cgroup stats file; 0 when the file or the key is missing."""
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def _v1_parents() -> list[Path]:
    """v1 nests under this process's own cgroups, so limits set on us still bind (the mount root if that path is
    not visible, as in a container without a cgroup namespace)."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own.update(dict.fromkeys(controllers.split(","), path))
    parents = [CGROUP_ROOT / c / own.get(c, "/").lstrip("/") for c in ("pids", "memory")]
    return [p if p.is_dir() else CGROUP_ROOT / c for p, c in zip(parents, ("pids", "memory"), strict=True)]


@functools.cache
def _v2_parent() -> Path:
    """v2 forbids processes in a cgroup whose children have controllers, so runs go under a parent of their own:
    `rllm-sandbox` at the root, or the delegated directory RLLM_SANDBOX_CGROUP names. memory and pids are enabled
    at every level down to it."""
    parent = Path(os.environ.get("RLLM_SANDBOX_CGROUP") or CGROUP_ROOT / "rllm-sandbox")
    parent.mkdir(exist_ok=True)
    for level in [*reversed(parent.parents), parent]:
        if level == CGROUP_ROOT or CGROUP_ROOT in level.parents:
            missing = {"memory", "pids"} - set((level / "cgroup.subtree_control").read_text().split())
            if missing:
                write_file(level / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(missing)))
    return parent


@functools.cache
def _sweep_once(parent: Path) -> None:
    """Remove empty run cgroups that a process killed mid-run (SIGKILL, power loss) left behind."""
    for stale in parent.glob("rllm-sandbox-*-*"):
        with contextlib.suppress(OSError, ValueError):
            if not Path(f"/proc/{int(stale.name.split('-')[2])}").exists():
                stale.rmdir()


class Cgroup:
    _serial = itertools.count()

    def __init__(self, dirs: list[Path], v2: bool) -> None:
        self.dirs, self.v2 = dirs, v2

    @classmethod
    def create(cls, memory_mb: int, pids: int) -> Cgroup:
        cgroup = cls([], v2=not (CGROUP_ROOT / "memory" / "cgroup.procs").exists())
        try:
            if not cgroup.v2:
                parents = _v1_parents()
            elif (CGROUP_ROOT / "cgroup.controllers").exists():
                parents = [_v2_parent()]
            else:
                raise SandboxUnavailableError(f"{NO_CGROUP} (no cgroup filesystem at {CGROUP_ROOT})")
            name = f"rllm-sandbox-{os.getpid()}-{next(cls._serial)}"
            for parent in parents:
                _sweep_once(parent)
                (parent / name).mkdir()
                cgroup.dirs.append(parent / name)
            cgroup._limit(memory_mb, pids)
        except OSError as e:
            cgroup.remove()
            raise SandboxUnavailableError(f"{NO_CGROUP} ({e})") from e
        return cgroup

    def _limit(self, memory_mb: int, pids: int) -> None:
        memory = memory_mb << 20
        pids_dir, memory_dir = self.dirs * 2 if self.v2 else self.dirs
        write_file(pids_dir / "pids.max", pids)
        write_file(memory_dir / ("memory.max" if self.v2 else "memory.limit_in_bytes"), memory)
        # No swap. Not memory.oom.group: killing bwrap with its init would orphan the init (see _kill).
        swap = memory_dir / ("memory.swap.max" if self.v2 else "memory.memsw.limit_in_bytes")
        if swap.exists():
            write_file(swap, 0 if self.v2 else memory)

    def join_files(self) -> list[Path]:
        """Where the launcher writes "0" to move itself in: v1's per-thread `tasks` (no global lock), v2's procs."""
        return [group / ("cgroup.procs" if self.v2 else "tasks") for group in self.dirs]

    def oom_killed(self) -> bool:
        if self.v2:
            return _counter(self.dirs[0] / "memory.events", "oom_kill") > 0
        control = self.dirs[1] / "memory.oom_control"
        return _counter(control, "oom_kill") > 0 or _counter(control, "under_oom") > 0

    def pids_exhausted(self) -> bool:
        return _counter(self.dirs[0] / "pids.events", "max") > 0

    def kill(self) -> None:
        if self.v2 and (self.dirs[0] / "cgroup.kill").exists():
            write_file(self.dirs[0] / "cgroup.kill", 1)
            return
        for _ in range(1000):  # v1: processes may fork while we kill them; pids.max bounds how many
            pids = set()
            for group in self.dirs:
                with contextlib.suppress(OSError):
                    pids.update(int(pid) for pid in (group / "cgroup.procs").read_text().split())
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Remove the directories; killed processes leave asynchronously, so kill and retry for up to 2 s."""
        for group in self.dirs:
            for attempt in range(400):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or attempt == 399:
                        warnings.warn(f"rllm sandbox: cannot remove cgroup {group}: {e}", stacklevel=2)
                        break
                    self.kill()
                    time.sleep(0.005)

"""The processes a test process started, found by the mark each of them inherits (set by tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Every process a test starts (a CLI run, Ray's daemons, a vLLM server) inherits this mark of the test process that
# started it (each xdist worker puts its own), so that a check for leftover processes counts only its own: the two
# xdist workers, or a verl test run beside the main suite, may each have Ray or vLLM running at the same time.
TEST_PROCESS_MARK = "RLLM_TEST_PROCESS"


def own_processes(keywords=("raylet", "gcs_server", "vllm serve")) -> dict[int, str]:
    """pid -> command line of the running processes that this test process started (directly or not: they carry its
    mark, see TEST_PROCESS_MARK) and whose command line names one of `keywords`: by default Ray's daemons and vLLM
    servers."""
    mark = f"{TEST_PROCESS_MARK}={os.environ[TEST_PROCESS_MARK]}".encode()
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if not any(k in args for k in keywords):
            continue
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # ended since the listing
            continue
        if mark in environment:
            found[int(pid)] = args
    return found


def leftover_processes() -> list[str]:
    """Ray daemons and vLLM servers this test process started that are still running."""
    return list(own_processes().values())


def processes_with(marker: str) -> list[int]:
    """Host pids, but this test process's, whose command line mentions `marker` (a sandboxed program gets it as an
    argument)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # ended since the listing
                pass
    return found

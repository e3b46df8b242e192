"""How many sandboxed runs per second rllm's code sandbox sustains, and what each run adds over a bare process.

    .venv/bin/python benchmarks/sandbox_throughput.py            # N=100 runs of `print(1)` per measurement

Measures, for a trivial Python program (`print(1)`):
- serial runs/s: one `Sandbox.run` after another (issue target: >= 25 runs/s);
- parallel runs/s: `run_async` with 2 workers (the default pool bound);
- added latency: mean ms of a serial sandboxed run minus the mean of a bare
  `subprocess.run([sys.executable, "-c", "print(1)"])`, plus how that splits: the same program under bwrap alone
  (namespaces + mounts, no cgroup or gate), and the interpreter's own start with the flags the sandbox uses.
Needs what the sandbox needs (bubblewrap, a writable cgroup): run it where the tests run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from rllm.rewards import sandbox as sandbox_module
from rllm.rewards.sandbox import Sandbox, SandboxLimits


def mean_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.mean(times) * 1000


def serial(sandbox: Sandbox, argv: list[str], n: int) -> float:
    def one():
        result = sandbox.run(argv)
        assert result.ok and result.stdout == b"1\n", result

    return mean_ms(one, n)


def parallel_runs_per_s(sandbox: Sandbox, argv: list[str], n: int) -> float:
    async def all_runs():
        return await asyncio.gather(*(sandbox.run_async(argv) for _ in range(n)))

    start = time.perf_counter()
    results = asyncio.run(all_runs())
    elapsed = time.perf_counter() - start
    assert all(r.ok for r in results)
    return n / elapsed


def bwrap_only_ms(sandbox: Sandbox, argv: list[str], n: int) -> float:
    """bwrap with the sandbox's namespaces and mounts, but no cgroup, gate, rlimits or output pump."""
    tools = sandbox_module._find_tools(as_root=os.geteuid() == 0)
    read_end, write_end = (sandbox_module._above_stdio(fd) for fd in os.pipe())
    command = [*sandbox_module._bwrap_argv(tools, SandboxLimits(), [], write_end), *argv]
    shared = [sandbox_module._root_user_namespace()] if tools.setpriv else []
    try:
        return mean_ms(lambda: subprocess.run(command, env={}, pass_fds=(write_end, *shared), capture_output=True), n)
    finally:
        os.close(read_end)
        os.close(write_end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100, help="runs per measurement")
    args = parser.parse_args()
    Sandbox.check()
    sandbox = Sandbox(max_workers=2)
    argv = sandbox.python_argv("-c", "print(1)")
    serial(sandbox, argv, 5)  # warm up: the readiness probe and the root user namespace are made once

    bare = mean_ms(lambda: subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True), args.n)
    interpreter = mean_ms(lambda: subprocess.run(argv, capture_output=True, env={}), args.n)
    bwrap = bwrap_only_ms(sandbox, argv, args.n)
    sandboxed = serial(sandbox, argv, args.n)
    parallel = parallel_runs_per_s(sandbox, argv, args.n)

    print(f"sandboxed print(1), serial   : {1000 / sandboxed:6.1f} runs/s ({sandboxed:.1f} ms/run, target >= 25 runs/s)")
    print(f"sandboxed print(1), 2 workers: {parallel:6.1f} runs/s")
    print(f"bare subprocess.run          : {bare:6.1f} ms/run  (sys.executable -c 'print(1)', site and all)")
    print(f"added latency over bare      : {sandboxed - bare:+6.1f} ms/run")
    print(f"  the sandbox's interpreter  : {interpreter:6.1f} ms/run  ({' '.join(argv[1:3])}, hidden site-packages)")
    print(f"  ... under bwrap alone      : {bwrap:6.1f} ms/run  (namespaces and mounts)")
    print(f"  cgroup, gate, rlimits, pump: {sandboxed - bwrap:6.1f} ms/run")


if __name__ == "__main__":
    main()

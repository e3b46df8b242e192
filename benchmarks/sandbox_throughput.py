"""How many sandboxed runs per second rllm's code sandbox sustains, and what each run adds over a bare process.

    .venv/bin/python benchmarks/sandbox_throughput.py            # N=100 runs of `print(1)` per measurement

Measures, for a trivial Python program (`print(1)`):
- serial runs/s: one `Sandbox.run` after another (issue target: >= 25 runs/s);
- parallel runs/s: `run_async` with 2 workers (the default pool bound);
- added latency: mean ms of a serial sandboxed run minus the mean of a bare
  `subprocess.run([sys.executable, "-c", "print(1)"])`;
- where a sandboxed run's time goes: the base interpreter started on the host with and without its site-packages
  (the sandbox hides them: their .pth files cost more than all the rest), the program under bwrap alone
  (namespaces, mounts, setpriv), and what remains (cgroup, the bash launcher with its rlimits, the output pump).
It needs what the sandbox needs (bubblewrap, a writable cgroup): run it where the tests run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

from rllm.sandbox import Sandbox, bwrap_only_command
from smoke import add_smoke_flag, device_line


def mean_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.mean(times) * 1000


def quiet(argv: list[str], **kwargs) -> None:
    subprocess.run(argv, capture_output=True, check=True, **kwargs)


def serial_ms(sandbox: Sandbox, argv: list[str], n: int) -> float:
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


def bwrap_only_ms(argv: list[str], n: int) -> float:
    """bwrap with the sandbox's namespaces and mounts, but no cgroup, launcher, rlimits or output pump."""
    with bwrap_only_command(argv) as (command, fds):
        return mean_ms(lambda: quiet(command, env={}, pass_fds=fds), n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100, help="runs per measurement")
    add_smoke_flag(parser)
    args = parser.parse_args()
    n = 3 if args.smoke else args.n
    print(device_line())
    Sandbox.check()
    sandbox = Sandbox(max_workers=2)
    argv = sandbox.python_argv("-c", "print(1)")
    serial_ms(sandbox, argv, 5)  # warm up: the readiness probe and the root user namespace are made once

    bare = mean_ms(lambda: quiet([sys.executable, "-c", "print(1)"]), n)
    with_site = mean_ms(lambda: quiet(argv, env={}), n)
    without_site = mean_ms(lambda: quiet([argv[0], "-S", *argv[1:]], env={}), n)
    bwrap = bwrap_only_ms(argv, n)
    sandboxed = serial_ms(sandbox, argv, n)
    parallel = parallel_runs_per_s(sandbox, argv, n)

    print(f"sandboxed print(1), serial    : {1000 / sandboxed:6.1f} runs/s ({sandboxed:.1f} ms/run; target >= 25/s)")
    print(f"sandboxed print(1), 2 workers : {parallel:6.1f} runs/s")
    print(f"bare subprocess.run           : {bare:6.1f} ms/run  ({sys.executable} -c 'print(1)')")
    print(f"added latency over bare       : {sandboxed - bare:+6.1f} ms/run")
    print("where a sandboxed run's time goes:")
    print(f"  base interpreter, host site : {with_site:6.1f} ms/run  (on the host, its site-packages' .pth files run)")
    print(f"  base interpreter, -S        : {without_site:6.1f} ms/run  (about what starting it costs inside)")
    print(f"  the same under bwrap alone  : {bwrap:6.1f} ms/run  (namespaces, mounts, setpriv as root)")
    print(f"  cgroup, launcher, pump      : {sandboxed - bwrap:6.1f} ms/run  (the rest of Sandbox.run)")


if __name__ == "__main__":
    main()

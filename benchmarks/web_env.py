"""What a web episode costs in a real browser (WebEnv: Playwright + Debian's headless Chromium, MiniWoB++ pages):
reset and step latency, memory per concurrent episode, and scripted episodes per second at 1, 4 and 16 at once.

    .venv/bin/python benchmarks/web_env.py            # ~1 minute on 2 cores

- latency, one episode at a time on a warm browser: `reset()` (a fresh context, the page loaded, seeded and started,
  its snapshot) and `step()` (the oracle's action done, the page settled, its snapshot), p50 and p95 over
  `--episodes` episodes of the oracle's tasks (rllm.tasks.web.oracle), in order, seeds 0, 1, ...;
- memory: PSS (/proc/<pid>/smaps_rollup) of every process under this one (Playwright's driver, the browser and its
  renderers) with 1 and then 16 episodes open at once: one browser's base and the MiB each extra episode adds;
- throughput: `--episodes` oracle episodes (reset, the oracle's steps, close) on a thread pool of 1, 4 and 16 on one
  shared browser; every reward must be 1 (those that are not are counted). The last line is `episodes/s: N` at 16.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from smoke import add_smoke_flag, device_line


def pss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms"


def episodes_of(count: int) -> list[tuple[str, int]]:
    from rllm.tasks.web.oracle import ORACLE_TASKS

    return [(ORACLE_TASKS[i % len(ORACLE_TASKS)], i // len(ORACLE_TASKS)) for i in range(count)]


def latency(episodes: list[tuple[str, int]]) -> None:
    from rllm.tasks.web.env import WebEnv
    from rllm.tasks.web.oracle import oracle_action

    resets, steps, failed = [], [], 0
    for task, seed in episodes:
        env = WebEnv({"task": task, "seed": seed})
        started = time.perf_counter()
        observation, _ = env.reset()
        resets.append(time.perf_counter() - started)
        for _ in range(10):
            action = oracle_action(task, observation)
            started = time.perf_counter()
            observation, reward, done, _ = env.step(action)
            steps.append(time.perf_counter() - started)
            if done:
                break
        failed += reward != 1.0
        env.close()
    print(f"reset: {percentiles(resets)}  ({len(resets)} episodes)")
    print(f"step:  {percentiles(steps)}  ({len(steps)} steps; not solved: {failed})")


def memory(count: int = 16) -> None:
    from rllm.tasks.web.browser import descendant_pids
    from rllm.tasks.web.env import WebEnv

    envs = [WebEnv({"task": "book-flight", "seed": 0})]
    envs[0].reset()
    one = pss_mib(descendant_pids())
    for seed in range(1, count):
        envs.append(WebEnv({"task": "book-flight", "seed": seed}))
        envs[-1].reset()
    many = pss_mib(descendant_pids())
    for env in envs:
        env.close()
    print(
        f"memory: {one:.0f} MiB PSS with 1 episode open (driver + browser + renderer), {many:.0f} MiB with {count}: "
        f"{(many - one) / (count - 1):.1f} MiB per extra episode"
    )


def throughput(episodes: list[tuple[str, int]], workers: int) -> float:
    from rllm.tasks.web.oracle import run_oracle

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        rewards = [reward for reward, _ in pool.map(lambda job: run_oracle(*job), episodes)]
    rate = len(episodes) / (time.perf_counter() - started)
    unsolved = sum(r != 1.0 for r in rewards)
    print(f"concurrency {workers:2d}: {rate:.2f} episodes/s  ({len(episodes)} episodes, not solved: {unsolved})")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=48, help="episodes per measurement (default 48)")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.episodes = 2
    workers = (1, 2) if args.smoke else (1, 4, 16)
    print(device_line())
    from rllm.tasks.web.browser import find_chromium, shared_pool

    print(f"browser: {find_chromium()}")
    pool = shared_pool()
    slot, context = pool.call(pool.new_context, 60)  # the browser launched once, outside the measurements
    pool.call(lambda: pool.release(slot, context), 30)
    episodes = episodes_of(args.episodes)
    latency(episodes[: min(30, len(episodes))])
    memory(workers[-1])
    rates = {count: throughput(episodes, count) for count in workers}
    print(f"episodes/s: {rates[workers[-1]]:.2f}")


if __name__ == "__main__":
    main()

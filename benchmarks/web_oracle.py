"""The scripted oracle (rllm.tasks.web.oracle) on every task it covers: does WebEnv's observation (goal +
accessibility tree) and action set suffice to solve them?

    .venv/bin/python benchmarks/web_oracle.py                         # 30 tasks x 10 seeds (~2 minutes on 2 cores)
    .venv/bin/python benchmarks/web_oracle.py --seeds 3 --tasks click-link,choose-list

Per task: the mean reward over seeds 0..N-1 (reward 1 when the page's own reward is positive), the episodes and the
mean steps taken. Ends with `oracle coverage: K/N tasks >= 0.9`; exits 1 if any task is below 0.9.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from smoke import add_smoke_flag, device_line

SMOKE_TASKS = "simple-arithmetic"  # one quick task: --smoke checks the path, not the coverage


def main(argv: list[str] | None = None) -> int:
    from rllm.tasks.web.oracle import ORACLE_TASKS, run_oracle

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="episodes per task, seeds 0..N-1 (default 10)")
    parser.add_argument("--tasks", default="", help="comma-separated tasks (default: all the oracle covers)")
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.seeds, args.tasks = 1, args.tasks or SMOKE_TASKS
    print(device_line())
    tasks = [t for t in args.tasks.split(",") if t] or list(ORACLE_TASKS)
    started = time.monotonic()
    print(f"{'task':28s} {'mean_reward':>11s} {'episodes':>8s} {'mean_steps':>10s}")
    covered = 0
    for task in tasks:
        played = [run_oracle(task, seed) for seed in range(args.seeds)]
        mean = statistics.fmean(reward for reward, _ in played)
        covered += mean >= 0.9
        print(f"{task:28s} {mean:11.2f} {len(played):8d} {statistics.fmean(s for _, s in played):10.1f}", flush=True)
    print(f"{len(tasks) * args.seeds} episodes in {time.monotonic() - started:.0f} s")
    print(f"oracle coverage: {covered}/{len(tasks)} tasks >= 0.9")
    return 0 if covered == len(tasks) else 1


if __name__ == "__main__":
    sys.exit(main())

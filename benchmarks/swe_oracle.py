"""Every shipped SWE task checked end to end: its own fix scores 1, and the unchanged (buggy) repository fails every
FAIL_TO_PASS test.

    .venv/bin/python benchmarks/swe_oracle.py                     # all shipped tasks (several minutes on 2 cores)
    .venv/bin/python benchmarks/swe_oracle.py --file t.jsonl      # a set made with `rllm swe build --out t.jsonl`
    .venv/bin/python benchmarks/swe_oracle.py --jobs 2 --limit 20

Per task: `grade(task, task["patch"])` (the grader's whole path: the task's trees, the policy check, `git apply` in a
fresh sandbox, FAIL_TO_PASS + PASS_TO_PASS, canaries) must give reward 1; then `run_tests(full, FAIL_TO_PASS)` on the
task's tree with its bug and nothing applied must report each of those tests failed or errored. Prints the counts
per package and in total, the seconds each check took, and every task that failed a check with the reason; exits 1
if any did. It needs what grading needs (bubblewrap, PyPI or the cached sdists under $RLLM_HOME/swe).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from smoke import add_smoke_flag, device_line


def check(task: dict) -> dict:
    from rllm.tasks.swe.grading import grade, run_tests, task_test_setup
    from rllm.tasks.swe.store import task_trees

    started = time.monotonic()
    result = grade(task, task["patch"])
    oracle_s = time.monotonic() - started
    _, full = task_trees(task)
    options, env = task_test_setup(task)  # the row's test_cmd / test_env (a src-layout package's PYTHONPATH)
    started = time.monotonic()
    run = run_tests(full, list(task["FAIL_TO_PASS"]), test_options=options, test_env=env)
    unchanged_s = time.monotonic() - started
    still_pass = [t for t in task["FAIL_TO_PASS"] if run.outcomes.get(t) not in ("failed", "error")]
    return {
        "id": task["instance_id"],
        "repo": task["repo"],
        "oracle": result.reward == 1.0,
        "oracle_reason": f"{result.reason}: {result.detail}"[:300],
        "unchanged_fails": not still_pass,
        "unchanged_reason": f"not failing: {still_pass[:3]} {run.killed_reason or ''}",
        "oracle_s": oracle_s,
        "unchanged_s": unchanged_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", help="a JSONL of task rows (default: the shipped set)")
    parser.add_argument("--jobs", type=int, default=1, help="tasks checked at once (default 1)")
    parser.add_argument("--limit", type=int, default=0, help="check only the first N tasks (by id)")
    add_smoke_flag(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.limit = 1
    print(device_line())
    if args.file:
        with open(args.file, encoding="utf-8") as f:
            tasks = [json.loads(line) for line in f if line.strip()]
    else:
        from rllm.tasks.swe.build import load_default_tasks

        tasks = load_default_tasks()
    tasks = sorted(tasks, key=lambda t: t["instance_id"])[: args.limit or None]
    started = time.monotonic()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(check, tasks))
    per_repo: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        per_repo[r["repo"]].append(r)
    print(f"{'package':<16} {'tasks':>5} {'oracle=1':>9} {'unchanged fails':>16}")
    for repo, rs in sorted(per_repo.items()):
        print(f"{repo:<16} {len(rs):>5} {sum(r['oracle'] for r in rs):>9} {sum(r['unchanged_fails'] for r in rs):>16}")
    ok_oracle, ok_unchanged = sum(r["oracle"] for r in results), sum(r["unchanged_fails"] for r in results)
    print(f"{'total':<16} {len(results):>5} {ok_oracle:>9} {ok_unchanged:>16}")
    if results:
        print(
            f"seconds per check (median / max): oracle {statistics.median(r['oracle_s'] for r in results):.2f} / "
            f"{max(r['oracle_s'] for r in results):.2f}, unchanged "
            f"{statistics.median(r['unchanged_s'] for r in results):.2f} / "
            f"{max(r['unchanged_s'] for r in results):.2f}; wall {time.monotonic() - started:.0f} s"
        )
    for r in results:
        if not r["oracle"]:
            print(f"ORACLE FAILED {r['id']}: {r['oracle_reason']}")
        if not r["unchanged_fails"]:
            print(f"UNCHANGED PASSES {r['id']}: {r['unchanged_reason']}")
    return 0 if ok_oracle == ok_unchanged == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

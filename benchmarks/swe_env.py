"""What an SWE episode costs in rllm's sandbox (SWEEnv, no Docker): set-up, tool calls, grading, memory per open
environment, and scripted episodes per second.

    .venv/bin/python benchmarks/swe_env.py            # 16 concurrent envs, 32 scripted episodes, shipped tasks

Tasks: `--task-source default` takes a deterministic handful of the shipped set (rllm.tasks.swe.build's
`load_default_tasks`: the first `--packages` packages by name, the first `--per-package` tasks of each by
instance_id whose fix is a few `str_replace` edits); when that set is not there yet it falls back to the tiny `calc`
task of tests/support/swe.py (no download) and says so. The first materialization of a real task downloads its
sdist from PyPI: `materialize <package>` times it apart from every other figure.

- latency, one environment at a time: `reset()` (a sandbox session started, its server answering), each tool call
  (`env.step` end to end: file_editor view of the buggy file, search across the repository, execute_bash of `true`
  and of `python -c "import <pkg>"`), `grade(task, task["patch"])` (the oracle fix in a fresh sandbox), and the
  `finish` step after the fix (the diff taken in the session, then graded);
- memory: `--concurrency` sessions open at once, each after a few calls and the fix: PSS and RSS of every process of
  theirs (the descendants of this process: bwrap, the sandbox's init, the workspace server), the tmpfs they use
  (their own mounts, read through /proc/<pid>/root), what their cgroups are charged, and this process's own growth;
- throughput: `--episodes` scripted episodes, `--concurrency` at a time on a thread pool, each reset -> view -> bash
  -> the fix by str_replace -> finish (graded) -> close; every reward must be 1.0 (those that are not are counted),
  with reset and finish times under that load (finish waits for a grader).
Grading runs on the shared sandbox's 2 workers (rllm.sandbox.default_sandbox), so at most 2 graders run at
once whatever the concurrency. It needs what the sandbox needs (bubblewrap, a writable cgroup; root for the overlay).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rllm.errors import RllmError
from rllm.sandbox import Sandbox
from rllm.tasks.swe.env import SWEEnv
from rllm.tasks.swe.grading import grade
from rllm.tasks.swe.patches import patch_paths
from rllm.tasks.swe.store import swe_home, task_trees
from smoke import add_smoke_flag, device_line

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Plan:
    """A task and the scripted fix of it."""

    task: dict
    path: str  # the buggy file, under /testbed
    search_term: str
    import_cmd: str
    edits: list[tuple[str, str]] = field(default_factory=list)  # (old_str, new_str) per hunk


def call(name: str, **arguments) -> dict:
    return {"tool_calls": [{"id": "c1", "name": name, "arguments": arguments}], "content": "", "errors": []}


def hunks(patch: str) -> list[tuple[str, str]]:
    """(old text, new text) of each hunk: its context and removed lines, its context and added lines."""
    found, old, new = [], None, None
    for line in [*patch.splitlines(), "@@ end"]:
        if line.startswith(("@@", "diff --git")) and old is not None:
            found.append(("\n".join(old), "\n".join(new)))
            old = new = None
        if line.startswith("@@"):
            old, new = [], []
        elif old is not None and not line.startswith("\\"):
            mark, text = (line[:1], line[1:]) if line else (" ", "")
            if mark in " -":
                old.append(text)
            if mark in " +":
                new.append(text)
    return found


def make_plan(task: dict) -> Plan | None:
    """The scripted fix of a one-file task whose hunks each match exactly one place of the buggy file; else None."""
    paths = patch_paths(task["patch"])
    if len(paths) != 1 or not paths[0].endswith(".py"):
        return None
    base, _ = task_trees(task)
    try:
        text = (base / paths[0]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    edits = hunks(task["patch"])
    if not edits or any(not old.strip() or text.count(old) != 1 for old, _ in edits):
        return None
    removed = [line[1:].strip() for line in task["patch"].splitlines() if line[:1] == "-" and line[1:].strip()]
    parts = PurePosixPath(paths[0]).parts
    where = "src" if parts[0] == "src" and len(parts) > 1 else "."
    package = parts[1 if where == "src" else 0].removesuffix(".py")
    import_cmd = f"cd {where} && python -c 'import {package}'"
    return Plan(task, f"/testbed/{paths[0]}", removed[0] if removed else package, import_cmd, edits)


def calc_plans() -> list[Plan]:
    """The calc task of tests/support/swe.py, its tree kept at a fixed place so that its task tree is made
    once and reused by later runs (a fresh directory would be a new task every run)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.swe import make_calc_task

    with tempfile.TemporaryDirectory() as tmp:
        row = make_calc_task(Path(tmp))
        repo = swe_home() / "bench" / "calc-repo"
        if _files(repo) != _files(Path(row["repo_dir"])):
            shutil.rmtree(repo, ignore_errors=True)
            shutil.copytree(row["repo_dir"], repo)
    return [make_plan({**row, "repo_dir": str(repo)})]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def default_plans(n_packages: int, per_package: int) -> tuple[list[Plan], str]:
    """A deterministic handful of the shipped tasks, or ([], why not): the set is not there yet, or a download
    failed."""
    try:
        from rllm.tasks.swe.build import load_default_tasks

        rows = load_default_tasks(split=None)
        by_package: dict[str, list[dict]] = {}
        for row in sorted(rows, key=lambda r: r["instance_id"]):
            by_package.setdefault(row.get("repo", "?"), []).append(row)
        plans = []
        for package in sorted(by_package)[:n_packages]:
            start, chosen = time.perf_counter(), []
            for row in by_package[package]:
                if len(chosen) < per_package and (plan := make_plan(row)) is not None:
                    chosen.append(plan)
            print(f"materialize {package}: {time.perf_counter() - start:.1f} s")  # the first run downloads
            plans += chosen
    except (ImportError, OSError, ValueError, RllmError) as e:
        return [], f"{type(e).__name__}: {e}"
    return plans, "" if plans else "no shipped task has a one-file fix made of unique hunks"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1), interpolated between the nearest ranks."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def report(name: str, seconds: list[float]) -> None:
    print(f"{name} p50: {pct(seconds, 0.5) * 1000:.1f} ms")
    print(f"{name} p95: {pct(seconds, 0.95) * 1000:.1f} ms")


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def checked_step(env: SWEEnv, action: dict) -> list:
    messages, _, done, info = env.step(action)
    assert not done and info["tool_errors"] == 0, (messages, info)
    return messages


# ---- latency, one environment at a time ---------------------------------------------------------------------------


def latencies(plans: list[Plan], rounds: int, calls: int) -> None:
    times: dict[str, list[float]] = {}
    wrong, warned = 0, set()
    for i in range(rounds):
        plan = plans[i % len(plans)]
        env = SWEEnv.from_dict(plan.task)
        try:
            times.setdefault("reset", []).append(timed(env.reset)[0])
            actions = {
                "file_editor view": call("file_editor", command="view", path=plan.path),
                "search": call("search", search_term=plan.search_term, path="/testbed"),
                "execute_bash true": call("execute_bash", cmd="true"),
                "execute_bash import": call("execute_bash", cmd=plan.import_cmd),
            }
            for _ in range(calls):
                for name, action in actions.items():
                    seconds, messages = timed(checked_step, env, action)
                    times.setdefault(name, []).append(seconds)
                    key = (plan.task["instance_id"], name)
                    if "[exit code" in messages[0]["content"] and key not in warned:
                        warned.add(key)
                        print(f"warning: {action} failed: {messages[0]['content'][-300:]}", file=sys.stderr)
            seconds, result = timed(grade, plan.task, plan.task["patch"])
            times.setdefault("grade oracle", []).append(seconds)
            wrong += warn_unless_solved(plan, "oracle patch", result.reward, result)
            for old, new in plan.edits:
                checked_step(env, call("file_editor", command="str_replace", path=plan.path, old_str=old, new_str=new))
            seconds, (_, reward, _, info) = timed(env.step, call("finish", command="submit"))
            times.setdefault("finish step", []).append(seconds)
            wrong += warn_unless_solved(plan, "scripted fix", reward, info)
        finally:
            env.close()
    for name, seconds in times.items():
        report(name, seconds)
    print(f"latency grades not 1.0: {wrong} of {2 * rounds}")


def warn_unless_solved(plan: Plan, what: str, reward: float, detail) -> bool:
    if reward != 1.0:
        print(f"warning: the {what} of {plan.task['instance_id']} scored {reward}: {detail}", file=sys.stderr)
    return reward != 1.0


# ---- memory per open environment ----------------------------------------------------------------------------------


def proc_lines(pid: int, name: str) -> list[str]:
    """/proc/<pid>/<name>'s lines; [] when the process is gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_text().splitlines()
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := proc_lines(int(entry), "stat")):
            children.setdefault(int(stat[0].rsplit(")", 1)[1].split()[1]), []).append(int(entry))  # ppid
    found, todo = [], list(children.get(pid, []))
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def rollup_kib(pid: int) -> dict[str, int]:
    """Rss and Pss of a process, from /proc/<pid>/smaps_rollup (kB); {} when it is gone."""
    values = {}
    for line in proc_lines(pid, "smaps_rollup"):
        key, _, rest = line.partition(":")
        if key in ("Rss", "Pss"):
            values[key] = int(rest.split()[0])
    return values


def own_tmpfs_bytes(pids: list[int]) -> int:
    """Bytes used on the tmpfs mounts the processes see that the host does not (their own /work, /tmp, /dev/shm,
    repository upper layer, root), each superblock once, read with statvfs through /proc/<pid>/root."""
    host = {line.split()[2] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    seen, used = set(), 0
    for pid in pids:
        for line in proc_lines(pid, "mountinfo"):
            fields = line.split()
            device, point, fstype = fields[2], fields[4], fields[fields.index("-") + 1]
            if fstype != "tmpfs" or device in host or device in seen:
                continue
            try:
                st = os.statvfs(f"/proc/{pid}/root{point}")
            except OSError:
                continue
            seen.add(device)
            used += (st.f_blocks - st.f_bfree) * st.f_frsize
    return used


def cgroup_bytes(pids: list[int]) -> int:
    """What the memory cgroups of the processes are charged (cgroup v1 or v2), each cgroup once."""
    groups = set()
    for pid in pids:
        for line in proc_lines(pid, "cgroup"):
            _, controllers, path = line.split(":", 2)
            if "rllm-sandbox" not in path:
                continue
            if "memory" in controllers.split(","):
                groups.add(Path("/sys/fs/cgroup/memory", path.lstrip("/"), "memory.usage_in_bytes"))
            elif controllers == "":
                groups.add(Path("/sys/fs/cgroup", path.lstrip("/"), "memory.current"))
    total = 0
    for group in groups:
        try:
            total += int(group.read_text())
        except (OSError, ValueError):
            pass
    return total


def self_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def memory(plans: list[Plan], n: int) -> None:
    leftover = descendants(os.getpid())
    assert not leftover, f"processes left from earlier sessions: {leftover}"
    rss_before = self_rss_kib()
    envs = [SWEEnv.from_dict(plans[i % len(plans)].task) for i in range(n)]

    def warm(i: int) -> None:  # a session mid-episode: it has read the repository, run Python, made the fix
        env, plan = envs[i], plans[i % len(plans)]
        env.reset()
        checked_step(env, call("file_editor", command="view", path=plan.path))
        checked_step(env, call("search", search_term=plan.search_term, path="/testbed"))
        checked_step(env, call("execute_bash", cmd=plan.import_cmd))
        for old, new in plan.edits:
            checked_step(env, call("file_editor", command="str_replace", path=plan.path, old_str=old, new_str=new))

    # Closed before the pool's threads end: a session dies with the thread that started it (bwrap's
    # --die-with-parent is the parent *thread's* death signal).
    with ThreadPoolExecutor(n) as pool:
        try:
            list(pool.map(warm, range(n)))
            time.sleep(0.5)
            pids = descendants(os.getpid())
            usage = [rollup_kib(pid) for pid in pids]
            pss = sum(u.get("Pss", 0) for u in usage) / 1024
            rss = sum(u.get("Rss", 0) for u in usage) / 1024
            tmpfs = own_tmpfs_bytes(pids) / (1 << 20)
            charged = cgroup_bytes(pids) / (1 << 20)
            host = (self_rss_kib() - rss_before) / 1024
        finally:
            for env in envs:
                env.close()
    print(f"open sessions: {n} sessions")
    print(f"processes per session: {len(pids) / n:.1f} processes")
    print(f"memory/env processes PSS: {pss / n:.2f} MiB")
    print(f"memory/env processes RSS: {rss / n:.2f} MiB")
    print(f"memory/env tmpfs: {tmpfs / n:.2f} MiB")
    print(f"memory/env cgroup charged: {charged / n:.2f} MiB")
    print(f"memory/env this process: {host / n:.2f} MiB")
    print(f"memory/env total (PSS + tmpfs + this process): {(pss + tmpfs + host) / n:.2f} MiB")


# ---- throughput ---------------------------------------------------------------------------------------------------


def episode(plan: Plan) -> tuple[float, dict[str, float]]:
    """One scripted episode; (its reward, seconds of its reset and finish). An exception scores 0 (and says so)."""
    env = SWEEnv.from_dict(plan.task)
    try:
        reset_s, _ = timed(env.reset)
        env.step(call("file_editor", command="view", path=plan.path))
        env.step(call("execute_bash", cmd=plan.import_cmd))
        for old, new in plan.edits:
            env.step(call("file_editor", command="str_replace", path=plan.path, old_str=old, new_str=new))
        finish_s, (_, reward, done, info) = timed(env.step, call("finish", command="submit"))
        warn_unless_solved(plan, "scripted episode", reward if done else 0.0, info)
        return reward if done else 0.0, {"reset": reset_s, "finish": finish_s}
    except Exception as e:
        print(f"warning: the scripted episode of {plan.task['instance_id']} raised {e!r}", file=sys.stderr)
        return 0.0, {}
    finally:
        env.close()


def throughput(plans: list[Plan], n: int, concurrency: int) -> None:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(episode, [plans[i % len(plans)] for i in range(n)]))
    wall = time.perf_counter() - start
    for name in ("reset", "finish"):
        report(f"{name} under load ({concurrency} concurrent)", [t[name] for _, t in results if t])
    print(f"episodes not rewarded 1.0: {sum(reward != 1.0 for reward, _ in results)} of {n}")
    print(f"episodes wall time: {wall:.1f} s")
    print(f"episodes/s: {n / wall:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=16, help="environments open at once")
    parser.add_argument("--episodes", type=int, default=32, help="scripted episodes for episodes/s")
    parser.add_argument("--task-source", choices=["default", "calc"], default="default")
    parser.add_argument("--packages", type=int, default=2, help="default tasks: how many packages")
    parser.add_argument("--per-package", type=int, default=3, help="default tasks: how many tasks of each")
    parser.add_argument("--rounds", type=int, default=10, help="latency: episodes, one at a time")
    parser.add_argument("--calls", type=int, default=5, help="latency: calls of each tool per episode")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.concurrency, args.episodes, args.packages, args.per_package, args.rounds, args.calls = 2, 2, 1, 1, 1, 1
    Sandbox.check()
    print(device_line())

    plans, why = default_plans(args.packages, args.per_package) if args.task_source == "default" else ([], "")
    if plans:
        names = sorted({p.task.get("repo", "?") for p in plans})
        print(f"tasks: default ({len(plans)} tasks of {', '.join(names)})")
    else:
        plans = calc_plans()
        print(f"tasks: calc{f' (the shipped set is not available: {why})' if why else ''}")
    latencies(plans, args.rounds, args.calls)
    memory(plans, args.concurrency)
    throughput(plans, args.episodes, args.concurrency)


if __name__ == "__main__":
    main()

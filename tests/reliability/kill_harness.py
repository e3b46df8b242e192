"""Runs `rllm train` (the real CLI entry point, `rllm.cli.main.main`) in child processes and kills them with a real
SIGKILL at a chosen moment, for the reliability tier. rllm has no test hooks: each child monkeypatches, in itself,
the calls through which a run's state reaches the disk, and kills itself just before the Nth of them.

    python tests/reliability/kill_harness.py < plans      one JSON plan a line in, one JSON result a line out

A plan: {"argv": [...], "runs_root": dir, "logs": dir, "jobs": 2, "threads": 1, "timeout_s": 120, "runs": [{"name":
str, "kills": [kill, ...]}, ...]} runs `jobs` runs at a time; a process still running after `timeout_s` is killed.
Each run is one process per kill, each resuming the run the previous one left (`--resume <run dir>`), then a last
process that resumes it to the end. A kill is {"op": N} (just before the Nth write point of that process) or
{"call": N} (at the Nth `torch.nn.Module.__call__`: a moment inside generation or an update, reproducible where a
timer is not). The result gives, per run, each process's exit ("killed" or its code) and what it did: its write
points, as "kind path" with the path relative to the run directory and process ids written PID, and its module
calls. {"kills": []} is a run without kill, whose write points a plan can then kill at, one run each; {"at_exit":
true} kills after the CLI returned. A run with "snapshot": true is copied (`snapshots/<name>`) as its first kill left
it; a run with "from": <name> starts as a copy of that snapshot, its first process resuming it (a copy of what a kill
left is what the kill left: the next kill does not need the first one run again).

Write points, each counted just before it happens, under the run directory only (creating the directory itself is
not one: a kill before it leaves nothing to resume):
- `open` of a file for writing, and each `write`/`writelines` to it; a kill at a write writes the first half of the
  data first (a torn line or file, what a kill inside one write(2) of a large buffer leaves),
- `torch.save` to a path (its C++ writer bypasses `open`), and its write, torn the same way,
- `os.mkdir` of a folder that is not there, `os.fsync`, `os.replace`/`os.rename`, `os.unlink`/`os.remove`,
  `os.rmdir` (so every file a `shutil.rmtree` removes is one), `os.truncate`.

Why a fork server: importing torch, transformers and rllm takes longer than a tiny run itself, so this process
imports them once (running no torch op, so no thread pool exists to be broken by fork) and forks one child per
process of a plan. It also loads the plan's tokenizer once (a quarter of a tiny run's time, and no torch op): each
child gets that copy for its first `load_tokenizer` of the model and loads any later one itself, as a run would.
Each child sets `torch.set_num_threads(plan["threads"])` (the same in every run, reference included, so that float
reductions happen in the same order; `"threads": null` leaves the count to rllm, as a user's `rllm train` does) and
writes its output to `logs/<run>.<i>.out`.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import re
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from rllm.types import Step, Trajectory
from rllm.workflows.base import Workflow

WRITE_MODES = set("wax+")


class TwoTurnParity(Workflow):
    """The workflow the tier trains: two turns in one conversation; each reply earns 1 for an odd number of
    characters, which a random model earns about half the time, so every group has reward variance and the weights
    move (a run whose weights never change would compare equal whatever resume did)."""

    async def run(self, task, uid):
        messages = [{"role": "user", "content": task["question"]}]
        steps = []
        for _ in range(2):
            output = await self.generate(messages)
            steps.append(Step(chat_completions=list(messages), model_output=output, reward=float(len(output.text) % 2)))
            messages = [*messages, {"role": "assistant", "content": output.text}, {"role": "user", "content": "Again."}]
        self.commit(Trajectory(steps=steps))


class Killer:
    """Counts the write points of one process under `run_dir` and the module calls; SIGKILLs the process at the
    one `kill` names. What was counted is written to `events_path` before the kill and at a normal exit."""

    def __init__(self, run_dir: Path, kill: dict[str, int] | None, events_path: Path) -> None:
        self.run_dir, self.kill, self.events_path = str(run_dir), kill or {}, events_path
        self.ops: list[str] = []
        self.calls = 0
        self._open = io.open
        self._originals: dict[str, Any] = {}

    # ---- counting and killing ------------------------------------------------------------------------------

    def point(self, kind: str, path: Any, torn: Any = None) -> None:
        where = self._relative(path)
        if where is None:
            return
        self.ops.append(f"{kind} {where}")
        if self.kill.get("op") == len(self.ops):
            if torn is not None:
                torn()
            self.die()

    def call(self) -> None:
        self.calls += 1
        if self.kill.get("call") == self.calls:
            self.die()

    def die(self) -> None:
        self.dump("killed")
        os.kill(os.getpid(), signal.SIGKILL)

    def dump(self, how: str) -> None:
        with self._open(self.events_path, "w", encoding="utf-8") as f:
            json.dump({"ops": self.ops, "calls": self.calls, "how": how}, f)
        sys.stdout.flush()
        sys.stderr.flush()

    def _relative(self, path: Any) -> str | None:
        if isinstance(path, int):  # a file descriptor
            path = os.readlink(f"/proc/self/fd/{path}")
        path = os.path.abspath(os.fsdecode(path))
        if not path.startswith(self.run_dir + os.sep):
            return None
        return re.sub(r"-\d+(?=/|$)", "-PID", path[len(self.run_dir) + 1 :])

    # ---- the patches ---------------------------------------------------------------------------------------

    def install(self) -> None:
        import torch

        killer = self
        real = self._originals
        for name in ("open", "mkdir", "fsync", "replace", "rename", "unlink", "remove", "rmdir", "truncate"):
            real[name] = getattr(io if name == "open" else os, name)
        real["save"], real["call"] = torch.save, torch.nn.Module.__call__

        def patched_open(file, mode="r", *args, **kwargs):
            writing = isinstance(file, (str, bytes, os.PathLike)) and WRITE_MODES & set(mode)
            if writing:
                killer.point(f"open-{mode[0]}", file)
            f = real["open"](file, mode, *args, **kwargs)
            return _File(f, killer, file, mode) if writing else f

        def with_dir_fd(path, kwargs):
            dir_fd = kwargs.get("dir_fd")
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path) if dir_fd is not None else path

        def patched(name):
            def op(path, *args, **kwargs):
                if name != "mkdir" or not os.path.exists(with_dir_fd(path, kwargs)):
                    killer.point(name, with_dir_fd(path, kwargs))
                return real[name](path, *args, **kwargs)

            return op

        def patched_replace(name):
            def op(src, dst, *args, **kwargs):
                killer.point(name, src)
                return real[name](src, dst, *args, **kwargs)

            return op

        def patched_save(obj, f, *args, **kwargs):
            if not isinstance(f, (str, os.PathLike)):
                return real["save"](obj, f, *args, **kwargs)
            killer.point("torch.save", f)
            saved = real["save"](obj, f, *args, **kwargs)
            killer.point("write-w", f, torn=lambda: os.truncate(f, os.path.getsize(f) // 2))  # a torn file
            return saved

        def patched_call(module, *args, **kwargs):
            killer.call()
            return real["call"](module, *args, **kwargs)

        builtins.open = io.open = patched_open
        for name in ("mkdir", "fsync", "unlink", "remove", "rmdir", "truncate"):
            setattr(os, name, patched(name))
        os.replace, os.rename = patched_replace("replace"), patched_replace("rename")
        torch.save, torch.nn.Module.__call__ = patched_save, patched_call


class _File:
    """A file opened for writing under the run directory: each write is a write point."""

    def __init__(self, f: Any, killer: Killer, path: Any, mode: str) -> None:
        self._f, self._killer, self._path, self._kind = f, killer, path, f"write-{mode[0]}"

    def write(self, data):
        torn = lambda: (self._f.write(data[: len(data) // 2]), self._f.flush())  # noqa: E731
        self._killer.point(self._kind, self._path, torn=torn)
        return self._f.write(data)

    def writelines(self, lines):
        self.write("".join(lines))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._f, name)


# ---- the fork server ---------------------------------------------------------------------------------------------


def preload() -> None:
    """Everything a run imports, imported before forking; no torch op runs here."""
    import peft  # noqa: F401
    import transformers
    from transformers.models.llama import configuration_llama, modeling_llama  # noqa: F401

    import rllm.cli.main
    import rllm.training.backends.torch
    import rllm.training.trainer  # noqa: F401

    transformers.AutoTokenizer, transformers.AutoModelForCausalLM, transformers.PreTrainedTokenizerFast  # noqa: B018


PRELOADED: dict[str, Any] = {}  # model name -> its tokenizer, loaded before forking


def preload_tokenizer(argv: list[str]) -> None:
    from rllm.models import registry

    name = next(arg.removeprefix("model.name=") for arg in reversed(argv) if arg.startswith("model.name="))
    if name not in PRELOADED:
        PRELOADED[name] = registry.load_tokenizer(name)


def hand_out_preloaded_tokenizers() -> None:
    """In a child: its first `load_tokenizer` of a preloaded model returns the pre-fork copy (the child's own, since
    the fork copied it); every other call loads as usual."""
    from rllm.models import registry

    real, spare = registry.load_tokenizer, dict(PRELOADED)

    def load_tokenizer(name_or_path):
        preloaded = spare.pop(str(name_or_path), None)
        return preloaded if preloaded is not None else real(name_or_path)

    registry.load_tokenizer = load_tokenizer


def child(argv: list[str], run_dir: Path, kill: dict | None, out: Path, threads: int | None) -> None:
    """Runs in the forked child: never returns."""
    rc = 1
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        hand_out_preloaded_tokenizers()
        killer = Killer(run_dir, kill, out.with_suffix(".json"))
        killer.install()
        from rllm.cli.main import main

        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            rc = 1
        if killer.kill.get("at_exit"):
            killer.die()  # after everything was written, before the process ends
        killer.dump(f"exit {rc}")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def run_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """Every run of `plan`, `plan["jobs"]` runs at a time (each run's processes one after another)."""
    root, logs = Path(plan["runs_root"]), Path(plan["logs"])
    snapshots = root.parent / "snapshots"
    logs.mkdir(parents=True, exist_ok=True)
    preload_tokenizer(plan["argv"])
    pending = list(plan["runs"])
    results: dict[str, list[dict[str, Any]]] = {}
    active: dict[int, tuple[dict, int, float]] = {}  # pid -> (run, index of its process, start)

    def start(run: dict, index: int) -> None:
        run_dir = root / run["name"]
        if index == 0 and "from" in run:
            shutil.copytree(snapshots / run["from"], run_dir, symlinks=True)
        argv = [*plan["argv"], f"trainer.run_dir={root}", f"trainer.name={run['name']}", "--no-progress"]
        if index > 0 or "from" in run:
            argv.append(f"--resume={run_dir}")
        kills = run["kills"]
        kill = kills[index] if index < len(kills) else None
        out = logs / f"{run['name']}.{index}.out"
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            child(argv, run_dir, kill, out, plan.get("threads", 1))
        active[pid] = (run, index, time.monotonic())

    while pending or active:
        while pending and len(active) < plan.get("jobs", 1):
            run = pending.pop(0)
            results[run["name"]] = []
            start(run, 0)
        pid, status = _wait(active, plan.get("timeout_s", 120))
        run, index, started = active.pop(pid)
        out = logs / f"{run['name']}.{index}.out"
        events = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
        signalled = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        exit_ = "killed" if signalled else f"exit {os.waitstatus_to_exitcode(status)}"
        if signalled and events.get("how") != "killed":
            exit_ = "killed from outside (timed out, or out of memory)"
        results[run["name"]].append(
            {
                "exit": exit_,
                "ops": events.get("ops", []),
                "calls": events.get("calls", 0),
                "out": str(out),
                "seconds": round(time.monotonic() - started, 2),
            }
        )
        # the next process resumes what the kill left; a process that ended otherwise ends its run (the test says
        # what it expected)
        if index < len(run["kills"]) and exit_ == "killed":
            if index == 0 and run.get("snapshot"):
                shutil.copytree(root / run["name"], snapshots / run["name"], symlinks=True)
            start(run, index + 1)
    return {"runs": results}


def _wait(active: dict[int, tuple], timeout_s: float) -> tuple[int, int]:
    """(pid, wait status) of the next child to end; a child running longer than `timeout_s` is killed (a hang must
    fail the test, not stall it)."""
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            return pid, status
        for child_pid, (_, _, started) in active.items():
            if time.monotonic() - started > timeout_s:
                os.kill(child_pid, signal.SIGKILL)
        time.sleep(0.01)


def main() -> None:
    protocol = os.fdopen(os.dup(1), "w")  # results only: anything else printed goes to stderr
    os.dup2(2, 1)
    preload()
    for line in sys.stdin:
        if line.strip():
            protocol.write(json.dumps(run_plan(json.loads(line))) + "\n")
            protocol.flush()


if __name__ == "__main__":
    main()

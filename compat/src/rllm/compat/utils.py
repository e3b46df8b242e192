"""rLLM v0.2's `rllm.utils`, for evaluation scripts written against rLLM: `compute_pass_at_k`, `save_trajectories`,
`colorful_print`, `colorful_warning`.

`EpisodeLogger`, `visualize_trajectories` and `VisualizationConfig` are rLLM's hooks into its verl trainer (per-step
episode JSON files, token-coloured `DataProto` batches); they import, and using them is an error naming rllm's
equivalent (every run writes `episodes.jsonl`; `rllm view <run dir>` shows them, tokens and masks included).
"""

from __future__ import annotations

import json
import os
import warnings
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from rllm.errors import RllmError

__all__ = [
    "EpisodeLogger",
    "VisualizationConfig",
    "colorful_print",
    "colorful_warning",
    "compute_pass_at_k",
    "save_trajectories",
    "visualize_trajectories",
]

_VIEWER = (
    "rllm writes every episode of a run to <run dir>/episodes.jsonl (rllm.runs.read_episodes) and `rllm view "
    "<run dir>` shows them, tokens, masks and rewards included"
)


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


def save_trajectories(results: Any, save_dir: str = "./trajectories", filename: str = "trajectories.pt") -> str:
    """`torch.save(results, save_dir/filename)`, as rLLM does; returns the path. Read them back with
    `torch.load(path, weights_only=False)` (they are Python objects, not tensors)."""
    import torch

    os.makedirs(save_dir, exist_ok=True)
    path = os.path.join(save_dir, filename)
    torch.save(results, path)
    print(f"Trajectories saved to {path}")
    return path


def colorful_print(string: str, *args: Any, **style: Any) -> None:
    """Print `string` styled as `click.style(string, *args, **style)` (fg=, bg=, bold=, ...); plain without click."""
    end = style.pop("end", "\n")
    print(_styled(string, *args, **style), end=end, flush=True)


def colorful_warning(string: str, *args: Any, **style: Any) -> None:
    warnings.warn(_styled(string, *args, **style), stacklevel=2)


def _styled(string: str, *args: Any, **style: Any) -> str:
    try:
        import click
    except ImportError:
        return string
    return click.style(string, *args, **style)


class _RllmTrainerHook:
    """An rLLM name for a hook into rLLM's own verl trainer; using it raises, naming rllm's equivalent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RllmError(f"{type(self).__name__} is rLLM's verl-trainer hook, not available here: {_VIEWER}")


class EpisodeLogger(_RllmTrainerHook):
    """rLLM's per-step episode JSON writer (see the module docstring)."""


class VisualizationConfig(_RllmTrainerHook):
    """rLLM's token-colouring styles for `visualize_trajectories` (see the module docstring)."""


def visualize_trajectories(*args: Any, **kwargs: Any) -> None:
    """rLLM's print of a verl `DataProto` batch (see the module docstring)."""
    raise RllmError(f"visualize_trajectories prints rLLM's verl batches, not available here: {_VIEWER}")

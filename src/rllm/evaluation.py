"""Evaluate an agent/env pair on a set of tasks and summarise the episodes (used by `rllm eval`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rllm.metrics import summarize_episodes
from rllm.runs import RunLog, write_json

__all__ = ["evaluate"]

async def evaluate(engine: Any, tasks: list[dict], out_dir: Path, *, n_rollouts: int = 1) -> dict:
    """Run every task through `engine`, write `episodes.jsonl` and `summary.json` into `out_dir`, return the
    summary."""
    start = time.perf_counter()
    episodes = await engine.execute_tasks_async(tasks, n_rollouts=n_rollouts)
    wall = time.perf_counter() - start
    summary = {**summarize_episodes(episodes, wall), "wall_time_s": wall}
    RunLog(out_dir).log_episodes(0, episodes, "eval")
    write_json(out_dir / "summary.json", summary)
    return summary

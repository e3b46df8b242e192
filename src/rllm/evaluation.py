"""Evaluate an agent/env pair on a set of tasks and summarise the episodes (used by `rllm eval`)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from rllm.runs import write_json, write_jsonl
from rllm.types import Episode

__all__ = ["completion_tokens", "evaluate", "summarize_episodes", "summarize_roles"]

_TIMES = ("time_model", "time_env", "time_reward", "time_total")


def summarize_episodes(episodes: list[Episode], wall_time: float) -> dict[str, Any]:
    """Success rate, mean reward, mean turns, tokens/s, termination reasons, mean time in model / env / reward code,
    and per role (trajectory name) the trajectory count, mean reward and success rate."""
    n = len(episodes)
    if n == 0:
        raise ValueError("no episodes to summarise: the task list was empty")
    rewards = [sum(t.final_reward() for t in ep.trajectories) for ep in episodes]
    turns = [sum(len(t.steps) for t in ep.trajectories) for ep in episodes]
    sampled = sum(completion_tokens(ep) for ep in episodes)
    reasons = Counter(ep.termination_reason.value if ep.termination_reason else "none" for ep in episodes)
    return {
        "episodes": n,
        "success_rate": sum(ep.is_correct for ep in episodes) / n,
        "mean_reward": sum(rewards) / n,
        "mean_turns": sum(turns) / n,
        "completion_tokens": sampled,
        "wall_time_s": wall_time,
        "tokens_per_s": sampled / wall_time if wall_time > 0 else 0.0,
        "token_mismatch": sum(int(ep.metrics.get("token_mismatch", 0)) for ep in episodes),
        "termination_reasons": dict(sorted(reasons.items())),
        "termination_fractions": {reason: count / n for reason, count in sorted(reasons.items())},
        **{f"mean_{key}_s": sum(float(ep.metrics.get(key, 0.0)) for ep in episodes) / n for key in _TIMES},
        "roles": summarize_roles(episodes),
    }


def summarize_roles(episodes: list[Episode]) -> dict[str, dict[str, float]]:
    """Per role: how many trajectories, their mean reward, and the fraction that succeeded (`Trajectory.succeeded`)."""
    roles: dict[str, list] = {}
    for trajectory in (t for ep in episodes for t in ep.trajectories):
        roles.setdefault(trajectory.name, []).append(trajectory)
    return {
        role: {
            "trajectories": len(ts),
            "mean_reward": sum(t.final_reward() for t in ts) / len(ts),
            "success_rate": sum(t.succeeded() for t in ts) / len(ts),
        }
        for role, ts in sorted(roles.items())
    }


async def evaluate(engine: Any, tasks: list[dict], out_dir: Path, *, n_rollouts: int = 1) -> dict:
    """Run every task through `engine`, write `episodes.jsonl` and `summary.json` into `out_dir`, return the
    summary."""
    start = time.perf_counter()
    episodes = await engine.execute_tasks_async(tasks, n_rollouts=n_rollouts)
    wall = time.perf_counter() - start
    summary = summarize_episodes(episodes, wall)
    write_jsonl(out_dir / "episodes.jsonl", episodes)
    write_json(out_dir / "summary.json", summary)
    return summary


def completion_tokens(episode: Episode) -> int:
    """Tokens the model sampled in this episode (0 where ids are unavailable)."""
    return sum(
        s.model_output.completion_length for t in episode.trajectories for s in t.steps if s.model_output is not None
    )

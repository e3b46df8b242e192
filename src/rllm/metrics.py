"""The one summary of a set of episodes, and its vocabulary. Workflows (per episode), the engines
(`engine.metrics`), `rllm eval` (`summary.json`) and training (`metrics.jsonl`, validation under `val/`) all call
`summarize_episodes` or its role part, so a number has one name and one meaning everywhere:

    episodes                 episodes summarised
    success_rate             fraction of episodes with `is_correct`
    reward_mean              mean of `Trajectory.final_reward()` over every trajectory (each trajectory counts
                             once, as it does in training; for one-agent tasks it is the mean episode reward)
    turns_mean               model calls per episode
    response_length_mean     sampled tokens per trajectory
    completion_tokens        sampled tokens in all
    tokens_per_s             completion_tokens / wall time (when the caller measured it)
    token_mismatch           turns whose prompt did not extend the previous one (each starts a new training row)
    termination/<reason>     fraction of episodes that ended for <reason> (`TerminationReason` values)
    time_<part>_s_mean       seconds per episode in model calls, env code, reward code, and in all (part: model,
                             env, reward, total)
    role/<r>/count           trajectories of role r (`Trajectory.name`)
    role/<r>/reward_mean     mean final reward of role r's trajectories
    role/<r>/success_rate    fraction of role r's trajectories that succeeded (`Trajectory.succeeded`)
    tool/<t>/calls_mean      calls of tool t per episode (tool envs: `info["tool_call_counts"]` of a trajectory's last
                             step, the env's counts for the whole trajectory; only tools called at least once)
    tool/<t>/success_rate    fraction of tool t's calls that returned without an error

A mean over nothing (no trajectories at all) is NaN, never a silent 0. Imports only `rllm.types`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from rllm.types import Episode, Trajectory

__all__ = ["completion_tokens", "role_metrics", "summarize_episodes", "tool_metrics"]

_TIMES = ("model", "env", "reward", "total")


def summarize_episodes(episodes: Sequence[Episode], wall_time_s: float | None = None) -> dict[str, Any]:
    """The vocabulary above for `episodes` (at least one)."""
    n = len(episodes)
    if n == 0:
        raise ValueError("no episodes to summarise: the task list was empty")
    trajectories = [t for episode in episodes for t in episode.trajectories]
    sampled = [completion_tokens(t) for t in trajectories]
    reasons = Counter(ep.termination_reason.value if ep.termination_reason else "none" for ep in episodes)
    summary: dict[str, Any] = {
        "episodes": n,
        "success_rate": sum(ep.is_correct for ep in episodes) / n,
        "reward_mean": _mean(t.final_reward() for t in trajectories),
        "turns_mean": sum(len(t.steps) for t in trajectories) / n,
        "response_length_mean": _mean(sampled),
        "completion_tokens": sum(sampled),
        "token_mismatch": sum(int(ep.metrics.get("token_mismatch", 0)) for ep in episodes),
        **{f"termination/{reason}": count / n for reason, count in sorted(reasons.items())},
        **{
            f"time_{part}_s_mean": _mean(float(ep.metrics.get(f"time_{part}", 0.0)) for ep in episodes)
            for part in _TIMES
        },
        **role_metrics(episodes),
        **tool_metrics(episodes),
    }
    if wall_time_s is not None:
        summary["tokens_per_s"] = sum(sampled) / wall_time_s if wall_time_s > 0 else 0.0
    return summary


def role_metrics(episodes: Iterable[Episode]) -> dict[str, float]:
    """`role/<r>/count`, `role/<r>/reward_mean` and `role/<r>/success_rate` for every role, roles sorted."""
    roles: dict[str, list[Trajectory]] = {}
    for trajectory in (t for episode in episodes for t in episode.trajectories):
        roles.setdefault(trajectory.name, []).append(trajectory)
    out: dict[str, float] = {}
    for role, trajectories in sorted(roles.items()):
        out[f"role/{role}/count"] = len(trajectories)
        out[f"role/{role}/reward_mean"] = _mean(t.final_reward() for t in trajectories)
        out[f"role/{role}/success_rate"] = _mean(float(t.succeeded()) for t in trajectories)
    return out


def tool_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """`tool/<t>/calls_mean` and `tool/<t>/success_rate` for every tool called, tools sorted."""
    calls: Counter[str] = Counter()
    ok: Counter[str] = Counter()
    for trajectory in (t for episode in episodes for t in episode.trajectories):
        counts = trajectory.steps[-1].info.get("tool_call_counts") if trajectory.steps else None
        if not isinstance(counts, dict):  # no tool env, or a user's env that uses the key otherwise
            continue
        for tool, count in counts.items():
            calls[tool] += int(count.get("calls", 0))
            ok[tool] += int(count.get("ok", 0))
    out: dict[str, float] = {}
    for tool in sorted(t for t in calls if calls[t]):
        out[f"tool/{tool}/calls_mean"] = calls[tool] / len(episodes)
        out[f"tool/{tool}/success_rate"] = ok[tool] / calls[tool]
    return out


def completion_tokens(trajectory: Trajectory) -> int:
    """Tokens the model sampled in this trajectory (0 where ids are unavailable)."""
    return sum(s.model_output.completion_length for s in trajectory.steps if s.model_output is not None)


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else float("nan")

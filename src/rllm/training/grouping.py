"""Group → filter → advantages: from a batch of episodes to the trajectories that train and each step's advantage.

Choices (see also `rllm.training.advantages`):

- Groups are keyed `"{task_id}:{role}"` (`group_key`): the n rollouts of one task played by one role form a group,
  whatever their lengths. Multi-agent episodes contribute one trajectory per role to that role's group.
- A trajectory's reward is `trajectory.reward`, or the sum of its step rewards when unset. An episode ended by a
  policy error gets `policy_error_reward` when one is configured.
- `valid` (counts in group statistics and trains) excludes infra errors (ours, not the policy's) when
  `mask_infra_errors`, episodes cut by a length limit when `filter_overlong` (DAPO's overlong filtering), and
  trajectories with no steps. Excluded trajectories never train; each exclusion is counted in the stats.
- `drop_uniform_groups` drops groups whose valid rewards are all equal: their advantages are 0 anyway, so they only
  cost compute (DAPO's dynamic sampling, without resampling). Counted.
- Stepwise mode: each step's return is its discounted future reward (`gamma`); the estimator then runs over the
  *steps* of a group (all steps of all its trajectories) instead of over trajectories, so a good step in a failed
  trajectory can still get a positive advantage. Trajectory mode broadcasts one advantage to every step.
- GAE is token-level and needs the critic: this module leaves its advantages at 0 and the backend computes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rllm.types import Episode, TerminationReason, Trajectory

__all__ = ["GroupedBatch", "group_and_score", "group_key", "trajectory_reward"]

_LENGTH_LIMITS = (TerminationReason.MAX_RESPONSE_LENGTH, TerminationReason.MAX_PROMPT_LENGTH)


@dataclass
class GroupedBatch:
    """The trajectories that train this step, each with one advantage per step, and what was left out."""

    trajectories: list[tuple[Episode, Trajectory]]
    step_advantages: list[list[float]]
    rewards: list[float]  # of the kept trajectories
    stats: dict[str, float] = field(default_factory=dict)


def group_key(episode: Episode, trajectory: Trajectory) -> str:
    return f"{episode.task_id}:{trajectory.name}"


def trajectory_reward(episode: Episode, trajectory: Trajectory, policy_error_reward: float | None = None) -> float:
    if policy_error_reward is not None and episode.termination_reason is TerminationReason.POLICY_ERROR:
        return float(policy_error_reward)
    return trajectory.final_reward()


def group_and_score(episodes: list[Episode], algorithm, greedy_rewards: dict[str, float] | None = None) -> GroupedBatch:
    """Apply the `AlgorithmConfig` rules above to `episodes`. `greedy_rewards` maps group key → the reward of that
    group's greedy rollout (ReMax's baseline)."""
    import torch

    from rllm.training.advantages import compute_advantages, group_index_from_keys, uniform_groups

    pairs = [(ep, traj) for ep in episodes for traj in ep.trajectories]
    keys = [group_key(ep, traj) for ep, traj in pairs]
    rewards = [trajectory_reward(ep, traj, algorithm.policy_error_reward) for ep, traj in pairs]
    valid, stats = _validity(pairs, algorithm)
    group_index = group_index_from_keys(keys)
    valid_t = torch.tensor(valid, dtype=torch.bool)
    keep = valid_t.clone()
    if algorithm.drop_uniform_groups:
        uniform = uniform_groups(torch.tensor(rewards), group_index, valid_t)
        stats["dropped_uniform"] = int((uniform & valid_t).sum())
        keep &= ~uniform
    options = _estimator_options(algorithm, keys, greedy_rewards)
    if algorithm.advantage == "gae":
        per_step = [[0.0] * len(traj.steps) for _, traj in pairs]
    elif algorithm.stepwise:
        per_step = _stepwise_advantages(pairs, keys, valid, algorithm, options)
    else:
        adv = compute_advantages(algorithm.advantage, torch.tensor(rewards), group_index, valid_t, **options)
        per_step = [[float(a)] * len(traj.steps) for a, (_, traj) in zip(adv.tolist(), pairs)]
    kept = [i for i in range(len(pairs)) if keep[i]]
    stats.update(trajectories=len(pairs), groups=int(group_index.unique().numel()) if pairs else 0, kept=len(kept))
    return GroupedBatch([pairs[i] for i in kept], [per_step[i] for i in kept], [rewards[i] for i in kept], stats)


def _validity(pairs, algorithm) -> tuple[list[bool], dict[str, float]]:
    stats = {"excluded_infra_error": 0, "excluded_overlong": 0, "excluded_empty": 0}
    valid = []
    for episode, trajectory in pairs:
        reason = episode.termination_reason
        if algorithm.mask_infra_errors and reason is TerminationReason.INFRA_ERROR:
            stats["excluded_infra_error"] += 1
        elif algorithm.filter_overlong and reason in _LENGTH_LIMITS:
            stats["excluded_overlong"] += 1
        elif not trajectory.steps:
            stats["excluded_empty"] += 1
        else:
            valid.append(True)
            continue
        valid.append(False)
    return valid, stats


def _estimator_options(algorithm, keys: list[str], greedy_rewards: dict[str, float] | None) -> dict:
    import torch

    if algorithm.advantage in ("grpo",):
        return {"norm_by_std": algorithm.norm_by_std}
    if algorithm.advantage != "remax":
        return {}
    if greedy_rewards is None:
        raise ValueError("remax needs the reward of each group's greedy rollout (greedy_rewards)")
    # group ids are assigned in first-seen order of the keys; index the baselines the same way
    order = list(dict.fromkeys(keys))
    missing = [k for k in order if k not in greedy_rewards]
    if missing:
        raise ValueError(f"remax: no greedy rollout for groups {missing[:5]}")
    return {"greedy_rewards_per_group": torch.tensor([greedy_rewards[k] for k in order])}


def _stepwise_advantages(pairs, keys, valid, algorithm, options) -> list[list[float]]:
    import torch

    from rllm.training.advantages import compute_advantages, discounted_returns, group_index_from_keys

    returns = [discounted_returns([s.reward for s in traj.steps], algorithm.gamma) for _, traj in pairs]
    flat_returns = [r for rs in returns for r in rs]
    flat_keys = [k for k, rs in zip(keys, returns) for _ in rs]
    flat_valid = [v for v, rs in zip(valid, returns) for _ in rs]
    if not flat_returns:
        return [[] for _ in pairs]
    adv = compute_advantages(
        algorithm.advantage,
        torch.tensor(flat_returns),
        group_index_from_keys(flat_keys),
        torch.tensor(flat_valid, dtype=torch.bool),
        **options,
    ).tolist()
    out, i = [], 0
    for rs in returns:
        out.append(adv[i : i + len(rs)])
        i += len(rs)
    return out

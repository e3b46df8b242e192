"""Group → filter → advantages: from a batch of episodes to the trajectories that train and each step's advantage.

Choices (see also `rllm.training.advantages`):

- Groups are keyed `"{task_id}:{role}"` (`group_key`, role = `Trajectory.name`): every trajectory of one role
  in the rollouts of one task lands in one group, whatever its number of steps -- a 1-step and a 3-step solver
  attempt are compared with each other. A multi-agent episode adds its trajectories to its roles' groups (a
  solver-judge episode with k solvers adds k to `task:solver` and one to `task:judge`).
- Each role has its own estimator and options: `algorithm.for_role(role)` applies `algorithm.roles[role]`
  (advantage, norm_by_std, stepwise, gamma) over the global settings, e.g. GRPO for the solvers and plain
  REINFORCE for a judge whose one trajectory per episode judges a different input each time. Validity, rewards
  and the uniform-group drop are the same for every role. Per-role reward means and counts go into the stats.
- A trajectory's reward is `trajectory.reward`, or the sum of its step rewards when unset. An episode ended by a
  policy error gets `policy_error_reward` when one is configured.
- `valid` (counts in group statistics and trains) excludes infra errors (ours, not the policy's) when
  `mask_infra_errors`, episodes cut by a length limit when `filter_overlong` (DAPO's overlong filtering), and
  trajectories with no steps. Excluded trajectories never train; each exclusion is counted in the stats.
- `drop_uniform_groups` drops groups whose valid rewards are all equal: under a group baseline their advantages are
  0 anyway, so they only cost compute (DAPO's dynamic sampling, without resampling). Counted. It applies to every
  role alike, including roles on reinforce or remax, whose uniform groups would still have carried a signal.
- Stepwise mode (global or per role): each step's return is its discounted future reward (`gamma`); the estimator then runs over the
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
    """Apply the `AlgorithmConfig` rules above to `episodes`, each role with its own settings
    (`algorithm.for_role(trajectory.name)`). `greedy_rewards` maps group key → the reward of that group's greedy
    rollout (ReMax's baseline; needed only for the groups of roles that use remax)."""
    pairs = [(ep, traj) for ep in episodes for traj in ep.trajectories]
    keys = [group_key(ep, traj) for ep, traj in pairs]
    rewards = [trajectory_reward(ep, traj, algorithm.policy_error_reward) for ep, traj in pairs]
    valid, stats = _validity(pairs, algorithm)
    keep = _drop_uniform(keys, rewards, valid, stats) if algorithm.drop_uniform_groups else list(valid)
    per_step: list[list[float]] = [[] for _ in pairs]
    for role, indices in _indices_by_role(pairs).items():
        role_rewards, role_valid = _pick(rewards, indices), _pick(valid, indices)
        settings = algorithm.for_role(role)
        role_advantages = _role_advantages(
            _pick(pairs, indices), _pick(keys, indices), role_rewards, role_valid, settings, greedy_rewards
        )
        for i, advantages in zip(indices, role_advantages, strict=True):
            per_step[i] = advantages  # back in the original order of `pairs`
        stats.update(_role_stats(role, role_rewards, role_valid))
    kept = [i for i in range(len(pairs)) if keep[i]]
    stats.update(trajectories=len(pairs), groups=len(set(keys)), kept=len(kept))
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


def _drop_uniform(keys: list[str], rewards: list[float], valid: list[bool], stats: dict) -> list[bool]:
    """`valid` with the members of uniform groups switched off; counts the valid ones dropped."""
    import torch

    from rllm.training.advantages import group_index_from_keys, uniform_groups

    valid_t = torch.tensor(valid, dtype=torch.bool)
    uniform = uniform_groups(torch.tensor(rewards), group_index_from_keys(keys), valid_t)
    stats["dropped_uniform"] = int((uniform & valid_t).sum())
    return (valid_t & ~uniform).tolist()


def _indices_by_role(pairs) -> dict[str, list[int]]:
    """Positions in `pairs` of each role's trajectories, roles in first-seen order."""
    by_role: dict[str, list[int]] = {}
    for i, (_, trajectory) in enumerate(pairs):
        by_role.setdefault(trajectory.name, []).append(i)
    return by_role


def _pick(items: list, indices: list[int]) -> list:
    return [items[i] for i in indices]


def _role_advantages(pairs, keys, rewards, valid, settings, greedy_rewards) -> list[list[float]]:
    """Per-step advantages of one role's trajectories under that role's effective settings.

    The estimator runs over *entries*: one per trajectory (its reward, then broadcast to every step), or in
    stepwise mode one per step (its discounted return), each entry in its trajectory's group."""
    from rllm.training.advantages import discounted_returns

    if settings.advantage == "gae":  # the backend computes it with the critic
        return [[0.0] * len(traj.steps) for _, traj in pairs]
    if settings.stepwise:
        values = [discounted_returns([s.reward for s in traj.steps], settings.gamma) for _, traj in pairs]
    else:
        values = [[reward] for reward in rewards]
    flat = _estimate(
        settings,
        [v for vs in values for v in vs],
        [k for k, vs in zip(keys, values) for _ in vs],
        [ok for ok, vs in zip(valid, values) for _ in vs],
        greedy_rewards,
    )
    out, i = [], 0
    for (_, traj), vs in zip(pairs, values):
        chunk = flat[i : i + len(vs)]
        i += len(vs)
        out.append(chunk if settings.stepwise else chunk * len(traj.steps))
    return out


def _estimate(settings, values: list[float], keys: list[str], valid: list[bool], greedy_rewards) -> list[float]:
    import torch

    from rllm.training.advantages import compute_advantages, group_index_from_keys

    if not values:
        return []
    # group ids are assigned in first-seen order of these keys; the options index per-group baselines the same way
    options = _estimator_options(settings, list(dict.fromkeys(keys)), greedy_rewards)
    return compute_advantages(
        settings.advantage,
        torch.tensor(values),
        group_index_from_keys(keys),
        torch.tensor(valid, dtype=torch.bool),
        **options,
    ).tolist()


def _estimator_options(settings, group_order: list[str], greedy_rewards: dict[str, float] | None) -> dict:
    import torch

    if settings.advantage == "grpo":
        return {"norm_by_std": settings.norm_by_std}
    if settings.advantage != "remax":
        return {}
    if greedy_rewards is None:
        raise ValueError("remax needs the reward of each group's greedy rollout (greedy_rewards)")
    missing = [k for k in group_order if k not in greedy_rewards]
    if missing:
        raise ValueError(f"remax: no greedy rollout for groups {missing[:5]}")
    return {"greedy_rewards_per_group": torch.tensor([greedy_rewards[k] for k in group_order])}


def _role_stats(role: str, rewards: list[float], valid: list[bool]) -> dict[str, float]:
    """Logged as `batch/<role>/...`: the mean reward of the role's valid trajectories (nan if none) and how many
    trajectories the role has in the batch."""
    counted = [r for r, ok in zip(rewards, valid) if ok]
    mean = sum(counted) / len(counted) if counted else float("nan")
    return {f"{role}/reward_mean": mean, f"{role}/trajectories": len(rewards)}

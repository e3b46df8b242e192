"""Advantages: which trajectories train this step and with what advantage, from pure estimator functions.

    batch = score_episodes(episodes, cfg.algorithm, greedy_rewards)   # group -> filter -> per-step advantages
    rows, _ = build_rows(batch.trajectories, step_advantages=batch.step_advantages, ...)
    apply_gae(rows, backend.compute_values(rows), cfg.algorithm)      # PPO with a critic only

Grouping and filtering (`score_episodes`):

- Groups are keyed `"{task_id}:{role}"` (`group_key`, role = `Trajectory.name`): every trajectory of one role in
  the rollouts of one task lands in one group, whatever its number of steps. A multi-agent episode adds its
  trajectories to its roles' groups (a solver-judge episode with k solvers adds k to `task:solver`, one to
  `task:judge`).
- Each role has its own estimator and options: `algorithm.for_role(role)` applies `algorithm.roles[role]`
  (advantage, norm_by_std, stepwise, gamma) over the global settings. Validity, rewards and the uniform-group drop
  are the same for every role.
- A trajectory's reward is `Trajectory.final_reward()`; an episode ended by a policy error gets
  `policy_error_reward` when one is configured.
- `valid` (counts in group statistics and trains) excludes infra errors (ours, not the policy's) when
  `mask_infra_errors`, episodes whose reward was refused (a reward function or env returned a non-finite one:
  `rllm.rewards.base.RewardError`), episodes cut by a length limit when `filter_overlong` (DAPO's overlong
  filtering), and trajectories with no steps. Each exclusion is counted in the stats.
- `drop_uniform_groups` drops groups whose valid rewards are all equal: under a group baseline their advantages are
  0 anyway (DAPO's dynamic sampling, without resampling). Counted. It applies to every role alike.
- Stepwise mode: each step's return is its discounted future reward (`gamma`, per step), and the estimator runs over
  the *steps* of a group instead of its trajectories, so a good step in a failed trajectory can still get a positive
  advantage. Trajectory mode broadcasts one advantage to every step. Discounting lives here and nowhere else.

Estimators: small pure functions on torch tensors, one per estimator, and one dispatcher (`compute_advantages`).

* `rewards[B]` holds one scalar per entry (a trajectory, or a step in stepwise mode).
* `group_index[B]` is an int tensor; entries with the same int belong to the same group (`group_index_from_keys`).
* `valid[B]` (bool, default all True) marks entries that count. Invalid entries neither contribute to any group
  statistic nor receive a nonzero advantage, so a crashed sandbox cannot shift the baseline of its healthy siblings.
* A group with fewer than two valid members carries no comparative signal: its advantage is 0 (GRPO, RLOO).
  `reinforce` has no baseline at all (the advantage is the reward), for roles without a meaningful group.

PPO with a critic (`gae`) is token-level: `score_episodes` leaves its step advantages at 0 and records the rewards
the critic sees (`step_rewards`); `apply_gae` then runs `gae_advantages` over each trajectory's action tokens with
the backend's values and whitens the result over the batch, as verl does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from rllm.rewards.shaping import soft_overlong_penalty
from rllm.types import Episode, TerminationReason, Trajectory

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ScoredBatch",
    "apply_gae",
    "compute_advantages",
    "discounted_returns",
    "dr_grpo_advantages",
    "gae_advantages",
    "group_index_from_keys",
    "group_key",
    "grpo_advantages",
    "informative_tasks",
    "masked_whiten",
    "overlong_penalties",
    "reinforce_advantages",
    "reinforce_pp_advantages",
    "remax_advantages",
    "rloo_advantages",
    "score_episodes",
    "trajectory_reward",
    "uniform_groups",
]


def group_index_from_keys(keys: list[str]) -> Tensor:
    """Map group keys (e.g. `"task_id:role"`) to ints in first-seen order: `["b", "a", "b"] -> [0, 1, 0]`."""
    ids: dict[str, int] = {}
    return torch.tensor([ids.setdefault(key, len(ids)) for key in keys], dtype=torch.long)


def _prepare(rewards: Tensor, group_index: Tensor, valid: Tensor | None) -> tuple[Tensor, Tensor, Tensor, int]:
    """float64 rewards, compact group ids 0..G-1, a bool valid mask, and G. Group statistics are computed in float64:
    in float32 the mean of eight 0.7s is off by an ulp and their std is an ulp, so GRPO's (r - mean) / (std + eps)
    gave that uniform group +0.056 each. (Uniform groups are also set to exactly 0 by the estimators.)"""
    rewards = rewards.to(torch.float64)
    valid = torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid.to(torch.bool)
    # Compact arbitrary ints (say, dataset row ids) so the per-group buffers are only as large as the batch.
    _, compact = torch.unique(group_index, return_inverse=True)
    return rewards, compact, valid, int(compact.max()) + 1 if compact.numel() else 0


def _group_sum(values: Tensor, group: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, group, values)


def _out_dtype(rewards: Tensor) -> torch.dtype:
    """The dtype an estimator returns: its input's floating dtype (float32 for integer rewards)."""
    return rewards.dtype if rewards.is_floating_point() else torch.float32


def _uniform(rewards: Tensor, group: Tensor, valid: Tensor, num_groups: int) -> Tensor:
    """Per entry: whether its group's valid rewards are all equal (exactly), or it has none."""
    lo = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
    hi = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
    # Invalid entries are sent to the reduction as +inf / -inf so they can never set a group's min or max.
    lo = lo.scatter_reduce(0, group, torch.where(valid, rewards, torch.inf), "amin", include_self=False)
    hi = hi.scatter_reduce(0, group, torch.where(valid, rewards, -torch.inf), "amax", include_self=False)
    n_valid = _group_sum(valid.to(rewards.dtype), group, num_groups)
    return ((lo == hi) | (n_valid == 0))[group]


def _group_count_mean_std(rewards: Tensor, group: Tensor, valid: Tensor, num_groups: int) -> tuple[Tensor, ...]:
    """Per-entry count, mean and unbiased std of the valid rewards of the entry's group."""
    w = valid.to(rewards.dtype)
    count = _group_sum(w, group, num_groups)
    mean = _group_sum(rewards * w, group, num_groups) / count.clamp(min=1)
    # Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which cancels catastrophically.
    sq_dev = _group_sum((rewards - mean[group]) ** 2 * w, group, num_groups)
    std = (sq_dev / (count - 1).clamp(min=1)).sqrt()
    return count[group], mean[group], std[group]


def grpo_advantages(
    rewards: Tensor, group_index: Tensor, valid: Tensor | None = None, *, norm_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """GRPO outcome advantage (Shao et al. 2024, DeepSeekMath; verl `adv_estimator=grpo`).

        A_i = (r_i - mean_g(r)) / (std_g(r) + eps)      over the valid members of i's group g

    The std is the *unbiased* (Bessel-corrected, n-1) sample std, as `torch.std` computes it in verl and TRL, so
    numbers match theirs: rewards [1, 0, 0, 1] give mean 0.5, std 0.5774, advantages +-0.866.
    A group with fewer than two valid members gets 0. verl instead sets mean 0 / std 1 for a singleton group,
    which hands the raw reward to the lone sample as its advantage -- a signal with no baseline at all.
    `norm_by_std=False` is Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): dividing by the std
    up-weights groups that are almost all right or all wrong. Its other half (no per-sequence length
    normalisation) is the loss aggregation `seq-mean-token-sum-norm` in `rllm.training.losses`.
    """
    dtype = _out_dtype(rewards)
    rewards, group, valid, num_groups = _prepare(rewards, group_index, valid)
    count, mean, std = _group_count_mean_std(rewards, group, valid, num_groups)
    advantages = rewards - mean
    if norm_by_std:
        advantages = advantages / (std + eps)
    keep = valid & (count > 1) & ~_uniform(rewards, group, valid, num_groups)  # a uniform group: exactly 0
    return torch.where(keep, advantages, torch.zeros_like(advantages)).to(dtype)


def dr_grpo_advantages(rewards: Tensor, group_index: Tensor, valid: Tensor | None = None) -> Tensor:
    """Dr.GRPO (Liu et al. 2025): `A_i = r_i - mean_g(r)`, i.e. GRPO without the std division. Pair it with the
    `seq-mean-token-sum-norm` loss aggregation to remove GRPO's length bias as well."""
    return grpo_advantages(rewards, group_index, valid, norm_by_std=False)


def rloo_advantages(rewards: Tensor, group_index: Tensor, valid: Tensor | None = None) -> Tensor:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024, "Back to Basics"; verl `rloo`).

        A_i = r_i - (sum_{j in g, j != i} r_j) / (n_g - 1)  =  n_g / (n_g - 1) * (r_i - mean_g(r))

    The baseline of sample i excludes i itself, so it is independent of i's action and the estimator unbiased.
    Only valid members count in n_g and in the sums; a group with fewer than two valid members gets 0.
    """
    dtype = _out_dtype(rewards)
    rewards, group, valid, num_groups = _prepare(rewards, group_index, valid)
    w = valid.to(rewards.dtype)
    count = _group_sum(w, group, num_groups)[group]
    total = _group_sum(rewards * w, group, num_groups)[group]
    advantages = rewards - (total - rewards) / (count - 1).clamp(min=1)
    keep = valid & (count > 1) & ~_uniform(rewards, group, valid, num_groups)  # a uniform group: exactly 0
    return torch.where(keep, advantages, torch.zeros_like(advantages)).to(dtype)


def remax_advantages(
    rewards: Tensor, group_index: Tensor, greedy_rewards_per_group: Tensor, valid: Tensor | None = None
) -> Tensor:
    """ReMax (Li et al. 2023, "ReMax: A Simple, Effective, and Efficient RL Method for Aligning LLMs"; verl `remax`).

        A_i = r_i - r_greedy[g(i)]

    The baseline is the reward of one greedy (argmax) rollout of the same prompt, which the caller runs separately
    and passes as `greedy_rewards_per_group`, indexed by the ids in `group_index` (not compacted). The greedy
    rollout itself is not trained on. Invalid entries get 0.
    """
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    advantages = rewards - greedy_rewards_per_group.to(rewards)[group_index]
    if valid is None:
        return advantages
    return torch.where(valid.to(torch.bool), advantages, torch.zeros_like(advantages))


def reinforce_advantages(rewards: Tensor, group_index: Tensor | None = None, valid: Tensor | None = None) -> Tensor:
    """Plain REINFORCE (Williams 1992): the reward itself is the advantage, with no baseline.

        A_i = r_i          (0 for invalid entries)

    `group_index` is accepted for a uniform signature and ignored. Without a baseline the gradient has more variance,
    and with rewards in [0, 1] it only ever pushes sampled answers up (a reward of 0 gives no gradient), so prefer
    a group baseline where there is a real group. Use this where there is none: e.g. a judge that writes one
    trajectory per episode, whose "group" would be its verdicts on different solver attempts -- different inputs,
    not n samples for one input to compare. Rewards centred on 0 (say +1 / -1 for a right / wrong verdict) help.
    """
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    if valid is None:
        return rewards.clone()
    return torch.where(valid.to(torch.bool), rewards, torch.zeros_like(rewards))


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """`(x - mean) / sqrt(var + eps)` over the entries where `mask` is set (unbiased var, as verl's
    `masked_whiten`); masked entries come back as 0. With fewer than two entries the variance is taken as 0."""
    w = mask.to(values.dtype)
    n = w.sum()
    mean = (values * w).sum() / n.clamp(min=1)
    var = ((values - mean) ** 2 * w).sum() / (n - 1).clamp(min=1)
    return (values - mean) * torch.rsqrt(var + eps) * w


def reinforce_pp_advantages(
    rewards: Tensor,
    group_index: Tensor | None = None,
    valid: Tensor | None = None,
    *,
    baseline: bool = True,
    eps: float = 1e-8,
) -> Tensor:
    """REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models").

        baseline=True  (verl `reinforce_plus_plus_baseline`):  A = whiten_batch(r_i - mean_g(r))
        baseline=False (verl `reinforce_plus_plus`):           A = whiten_batch(r_i)

    `whiten_batch` is `masked_whiten` over the valid entries of the whole batch: the normalisation is global, not
    per group, which is what separates it from GRPO (a group with near-identical rewards is not blown up).
    After group centring the batch mean is already 0, so whitening only rescales and a singleton group stays 0.
    Scope: this is the trajectory-level form, whitened over trajectories. verl whitens over response tokens, which
    weights each trajectory by its length; and the paper's token-level KL-in-reward variant (per-token
    `r_t - beta * KL_t` with discounted returns) is out of scope here -- use a KL loss term instead.
    """
    dtype = _out_dtype(rewards)
    rewards = rewards.to(torch.float64)
    valid = torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid.to(torch.bool)
    if not baseline:
        return masked_whiten(rewards, valid, eps).to(dtype)
    if group_index is None:
        raise ValueError("reinforce_pp_advantages(baseline=True) needs group_index")
    rewards, group, valid, num_groups = _prepare(rewards, group_index, valid)
    _, mean, _ = _group_count_mean_std(rewards, group, valid, num_groups)
    advantages = masked_whiten(rewards - mean, valid, eps)
    uniform = _uniform(rewards, group, valid, num_groups)  # centred to 0: exactly 0, not whitening's rounding
    return torch.where(uniform, torch.zeros_like(advantages), advantages).to(dtype)


def gae_advantages(
    token_rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation over action tokens (Schulman et al. 2016; verl `gae`). Returns
    `(advantages, returns)`, both [B, T] and 0 where `mask` is 0.

        delta_t = r_t + gamma * V_next(t) - V_t
        A_t     = delta_t + gamma * lam * A_next(t)          returns_t = A_t + V_t

    where next(t) is the next position *with mask 1* in the same row, not t + 1. In a multi-turn row
    `[A0 A0 | obs obs | A1 A1]` the observation tokens were written by the environment, not chosen by the policy:
    they are not MDP steps. So the last token of A0 bootstraps from the value at the first token of A1, and gamma
    and lam discount per action token (the observation's length does not shrink the credit reaching A0). Running
    the recursion straight through observation tokens would instead bootstrap from critic values on text the
    policy never chose and decay credit by the observation's length.
    The last action token of a row is terminal (V_next = 0): a row is one trajectory, and a length-truncated one is
    treated as ended, as verl does. Rewards must sit on action tokens (the trajectory reward on the last one); a
    nonzero reward on a masked position would be silently lost, so it is an error.
    No whitening here: PPO usually whitens advantages over the batch -- use `masked_whiten(adv, mask)`.
    """
    mask = mask.to(torch.bool)
    if bool(((token_rewards != 0) & ~mask).any()):
        raise ValueError("gae_advantages: nonzero reward on a masked (non-action) token; put rewards on action tokens")
    zero = torch.zeros_like(values[:, 0])
    next_value, next_adv = zero, zero
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        m = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        advantages[:, t] = torch.where(m, adv, zero)
        # On a masked position carry the next action token's value and advantage through unchanged
        # (torch.where, not arithmetic, so garbage values on padding cannot leak in as NaN * 0).
        next_value = torch.where(m, values[:, t], next_value)
        next_adv = torch.where(m, adv, next_adv)
    returns = torch.where(mask, advantages + values, torch.zeros_like(values))
    return advantages, returns


def discounted_returns(step_rewards: list[float], gamma: float) -> list[float]:
    """Return-to-go for the stepwise mode: `G_t = r_t + gamma * G_{t+1}`, with `G` = 0 after the last step.
    Each step of a long trajectory is then trained with its own discounted future reward."""
    returns, future = [], 0.0
    for reward in reversed(step_rewards):
        future = float(reward) + gamma * future
        returns.append(future)
    return returns[::-1]


def uniform_groups(rewards: Tensor, group_index: Tensor, valid: Tensor | None = None) -> Tensor:
    """True for every entry (valid or not) whose group's valid rewards are all equal (exact float equality) --
    including groups with one valid member or none. Such groups have zero GRPO/RLOO advantage everywhere and only
    dilute the batch; DAPO's dynamic sampling (Yu et al. 2025) drops them and samples more."""
    return _uniform(*_prepare(rewards, group_index, valid))


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., Tensor | tuple[Tensor, Tensor]]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "remax": remax_advantages,
    "reinforce_pp": reinforce_pp_advantages,
    "reinforce": reinforce_advantages,
    "gae": gae_advantages,
}


def compute_advantages(
    name: str, rewards: Tensor, group_index: Tensor, valid: Tensor | None = None, **options
) -> Tensor:
    """Dispatch a trajectory-level estimator by name (`remax` needs `greedy_rewards_per_group=`). GAE works on
    token-level rewards and values: call `gae_advantages` directly."""
    if name == "gae" or name not in ADVANTAGE_ESTIMATORS:
        known = sorted(set(ADVANTAGE_ESTIMATORS) - {"gae"})
        raise ValueError(
            f"unknown trajectory-level advantage estimator {name!r}; choose from {known} "
            "(gae is token-level: use gae_advantages)"
        )
    if name == "remax":
        if "greedy_rewards_per_group" not in options:
            raise ValueError("remax needs greedy_rewards_per_group= (the reward of each group's greedy rollout)")
        return remax_advantages(rewards, group_index, valid=valid, **options)
    return ADVANTAGE_ESTIMATORS[name](rewards, group_index, valid, **options)


# ---- from episodes to per-step advantages ------------------------------------------------------------------------

_LENGTH_LIMITS = (TerminationReason.MAX_RESPONSE_LENGTH, TerminationReason.MAX_PROMPT_LENGTH)


@dataclass
class ScoredBatch:
    """The trajectories that train this step (input order), one advantage per step each, the per-step rewards a
    critic's GAE sees (each step's reward in stepwise mode, else the trajectory's reward on its last step), and
    counts of what was left out."""

    trajectories: list[tuple[Episode, Trajectory]]
    step_advantages: list[list[float]]
    step_rewards: list[list[float]]
    rewards: list[float]  # one per kept trajectory
    stats: dict[str, float] = field(default_factory=dict)


def group_key(episode: Episode, trajectory: Trajectory) -> str:
    return f"{episode.task_id}:{trajectory.name}"


def trajectory_reward(episode: Episode, trajectory: Trajectory, policy_error_reward: float | None = None) -> float:
    if policy_error_reward is not None and episode.termination_reason is TerminationReason.POLICY_ERROR:
        return float(policy_error_reward)
    return trajectory.final_reward()


def overlong_penalties(trajectory: Trajectory, algorithm: Any, max_tokens: int | None) -> list[float]:
    """Per step, DAPO's soft overlong punishment of its reply (`algorithm.overlong_buffer` tokens before
    `max_tokens`, the rollout's per-reply limit); all 0 when it is off."""
    if algorithm.overlong_buffer is None or max_tokens is None:
        return [0.0] * len(trajectory.steps)
    return [
        soft_overlong_penalty(
            step.model_output.completion_length if step.model_output else 0,
            max_tokens,
            algorithm.overlong_buffer,
            algorithm.overlong_penalty,
        )
        for step in trajectory.steps
    ]


@dataclass
class _Outcomes:
    """What scoring needs of every (episode, trajectory) pair before any estimator runs."""

    pairs: list[tuple[Episode, Trajectory]]
    keys: list[str]
    penalties: list[list[float]]  # per step, DAPO's overlong punishment (0 when off)
    rewards: list[float]  # the trajectory's reward, punishment included
    valid: list[bool]
    uniform: list[bool]  # its group's valid rewards are all equal
    stats: dict[str, float]


def _outcomes(episodes: Sequence[Episode], algorithm: Any, max_tokens: int | None) -> _Outcomes:
    pairs = [(episode, trajectory) for episode in episodes for trajectory in episode.trajectories]
    keys = [group_key(*pair) for pair in pairs]
    penalties = [overlong_penalties(trajectory, algorithm, max_tokens) for _, trajectory in pairs]
    rewards = [
        trajectory_reward(episode, trajectory, algorithm.policy_error_reward) + sum(penalty)
        for (episode, trajectory), penalty in zip(pairs, penalties, strict=True)
    ]
    valid, stats = _validity(pairs, algorithm)
    if algorithm.overlong_buffer is not None:
        stats["overlong_penalized"] = sum(p < 0 for penalty in penalties for p in penalty)
    uniform = (
        uniform_groups(
            torch.tensor(rewards, dtype=torch.float64),
            group_index_from_keys(keys),
            torch.tensor(valid, dtype=torch.bool),
        ).tolist()
        if pairs
        else []
    )
    # groups with a valid member whose rewards are all equal: no signal for a group baseline (every estimator but
    # reinforce, remax and gae gives them 0)
    stats["uniform_groups"] = len({k for k, u, v in zip(keys, uniform, valid, strict=True) if u and v})
    stats["tasks"] = len({episode.task_id for episode in episodes})
    return _Outcomes(pairs, keys, penalties, rewards, valid, uniform, stats)


def informative_tasks(episodes: Sequence[Episode], algorithm: Any, *, max_tokens: int | None = None) -> set[str]:
    """The task ids with at least one group whose valid rewards differ: what DAPO's dynamic sampling counts."""
    found = _outcomes(episodes, algorithm, max_tokens)
    return {
        episode.task_id
        for (episode, _), u, v in zip(found.pairs, found.uniform, found.valid, strict=True)
        if v and not u
    }


def score_episodes(
    episodes: Sequence[Episode],
    algorithm: Any,
    greedy_rewards: dict[str, float] | None = None,
    *,
    max_tokens: int | None = None,
) -> ScoredBatch:
    """Group, filter and score `episodes` under an `AlgorithmConfig` (module docstring). `greedy_rewards` maps a
    group key to the reward of that group's greedy rollout: ReMax's baseline, needed for roles that use remax.
    `max_tokens` (the rollout's per-reply limit) is what `algorithm.overlong_buffer` counts back from: each reply's
    penalty is added to its step's reward and to its trajectory's."""
    found = _outcomes(episodes, algorithm, max_tokens)
    pairs, keys, penalties, rewards, valid, stats = (
        found.pairs,
        found.keys,
        found.penalties,
        found.rewards,
        found.valid,
        found.stats,
    )
    keep = list(valid)
    if algorithm.drop_uniform_groups:
        stats["dropped_uniform"] = sum(u and v for u, v in zip(found.uniform, valid, strict=True))
        keep = [v and not u for v, u in zip(valid, found.uniform, strict=True)]
    advantages: list[list[float]] = [[] for _ in pairs]
    critic_rewards: list[list[float]] = [[] for _ in pairs]
    for role in dict.fromkeys(trajectory.name for _, trajectory in pairs):
        settings = algorithm.for_role(role)
        mine = [i for i, (_, trajectory) in enumerate(pairs) if trajectory.name == role]
        steps = [[step.reward + p for step, p in zip(pairs[i][1].steps, penalties[i], strict=True)] for i in mine]
        role_advantages = _role_step_advantages(
            settings,
            steps,
            [keys[i] for i in mine],
            [rewards[i] for i in mine],
            [valid[i] for i in mine],
            greedy_rewards,
        )
        for i, step_rewards, step_advantages in zip(mine, steps, role_advantages, strict=True):
            advantages[i] = step_advantages
            last = [0.0] * (len(step_rewards) - 1) + [rewards[i]] if step_rewards else []
            critic_rewards[i] = step_rewards if settings.stepwise else last
    kept = [i for i in range(len(pairs)) if keep[i]]
    stats.update(trajectories=len(pairs), groups=len(set(keys)), kept=len(kept))
    return ScoredBatch(
        [pairs[i] for i in kept],
        [advantages[i] for i in kept],
        [critic_rewards[i] for i in kept],
        [rewards[i] for i in kept],
        stats,
    )


def _validity(pairs: list[tuple[Episode, Trajectory]], algorithm: Any) -> tuple[list[bool], dict[str, float]]:
    stats = {"excluded_infra_error": 0, "excluded_overlong": 0, "excluded_empty": 0, "excluded_reward_error": 0}
    valid = []
    for episode, trajectory in pairs:
        reason = episode.termination_reason
        if algorithm.mask_infra_errors and reason is TerminationReason.INFRA_ERROR:
            stats["excluded_infra_error"] += 1
        elif reason is TerminationReason.ERROR and episode.info.get("error_site") == "reward":
            stats["excluded_reward_error"] += 1  # a refused reward is no reward: never trained as 0
        elif algorithm.filter_overlong and reason in _LENGTH_LIMITS:
            stats["excluded_overlong"] += 1
        elif not trajectory.steps:
            stats["excluded_empty"] += 1
        else:
            valid.append(True)
            continue
        valid.append(False)
    return valid, stats


def _role_step_advantages(
    settings: Any,
    steps: list[list[float]],
    keys: list[str],
    rewards: list[float],
    valid: list[bool],
    greedy_rewards: dict[str, float] | None,
) -> list[list[float]]:
    """One role's advantages, one per step. The estimator runs over entries: one per trajectory (its reward, then
    broadcast to every step) or, stepwise, one per step (its discounted return), each in its trajectory's group."""
    if settings.advantage == "gae":
        return [[0.0] * len(s) for s in steps]  # token-level: `apply_gae` fills them in with the critic's values
    entries = [discounted_returns(s, settings.gamma) for s in steps] if settings.stepwise else [[r] for r in rewards]
    flat_keys = [key for key, values in zip(keys, entries, strict=True) for _ in values]
    if not flat_keys:
        return [[] for _ in steps]
    options: dict[str, Any] = {"norm_by_std": settings.norm_by_std} if settings.advantage == "grpo" else {}
    values = [value for values in entries for value in values]
    greedy: list[float] = []
    if settings.advantage == "remax":
        groups = list(dict.fromkeys(flat_keys))  # the order group_index_from_keys numbers them in
        missing = [key for key in groups if key not in (greedy_rewards or {})]
        if missing:
            raise ValueError(f"remax needs the reward of a greedy rollout for every group; none for {missing[:5]}")
        greedy = [greedy_rewards[key] for key in groups]
    shift = _overflow_exponent(values + greedy)  # rewards are divided by 2**shift (exactly) for the estimators
    if greedy:
        options["greedy_rewards_per_group"] = torch.tensor([math.ldexp(g, -shift) for g in greedy], dtype=torch.float64)
    flat = compute_advantages(  # float64: rewards as the user's code returned them, group statistics exact to an ulp
        settings.advantage,
        torch.tensor([math.ldexp(value, -shift) for value in values], dtype=torch.float64),
        group_index_from_keys(flat_keys),
        torch.tensor([ok for ok, values in zip(valid, entries, strict=True) for _ in values]),
        **options,
    ).tolist()
    if shift and not _scale_free(settings):
        flat = [_times_power_of_two(a, shift) for a in flat]  # back to reward units, in Python floats (float64)
    out, start = [], 0
    for step_list, values in zip(steps, entries, strict=True):
        chunk, start = flat[start : start + len(values)], start + len(values)
        out.append(chunk if settings.stepwise else chunk * len(step_list))
    return out


def _overflow_exponent(values: list[float]) -> int:
    """k such that rewards divided by 2**k cannot overflow the float32 estimators (their squares, summed over a group,
    stay far below float32's 3.4e38): 0 for rewards of ordinary size, which are then used exactly as they are."""
    largest = max((abs(v) for v in values), default=0.0)
    return 0 if largest <= 2.0**50 else math.frexp(largest)[1]


def _times_power_of_two(value: float, exponent: int) -> float:
    try:
        return math.ldexp(value, exponent)
    except OverflowError:  # beyond float64: the update's non-finite guard skips what it cannot train on
        return math.copysign(math.inf, value)


def _scale_free(settings: Any) -> bool:
    """Estimators whose advantages do not change when every reward is scaled (normalised by a std)."""
    return (settings.advantage == "grpo" and settings.norm_by_std) or settings.advantage == "reinforce_pp"


# ---- PPO with a critic -------------------------------------------------------------------------------------------


def apply_gae(rows: Sequence[Any], values: Sequence[Sequence[float]], algorithm: Any) -> dict[str, float]:
    """Fill each training row's `advantages`, `returns` and `old_values` from the critic's `values` (token-aligned
    per row, as `TorchBackend.compute_values` returns them) and the rows' `rewards` (`build_rows(step_rewards=)`).

    GAE runs over the action tokens of one *trajectory* in order, across all of its rows: a trajectory split into
    two rows (a template that rewrote history) bootstraps from its next row instead of ending at the split. gamma and
    lam are the role's (`algorithm.for_role`), applied per action token as in verl. The advantages are then whitened
    over every action token of the batch (verl's `masked_whiten`). Returns the mean return and old value."""
    advantages = [[0.0] * len(row) for row in rows]
    returns = [[0.0] * len(row) for row in rows]
    by_trajectory: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        by_trajectory.setdefault(row.trajectory_index, []).append(i)
    slots: list[tuple[int, int]] = []  # (row, token) of every action token, trajectory by trajectory
    for indices in by_trajectory.values():
        settings = algorithm.for_role(rows[indices[0]].trajectory_name)
        mine = [(i, t) for i in indices for t, mask in enumerate(rows[i].loss_mask) if mask]
        if not mine:
            continue
        token_rewards = torch.tensor([[rows[i].rewards[t] for i, t in mine]], dtype=torch.float32)
        token_values = torch.tensor([[float(values[i][t]) for i, t in mine]], dtype=torch.float32)
        adv, ret = gae_advantages(
            token_rewards,
            token_values,
            torch.ones_like(token_rewards, dtype=torch.bool),
            gamma=settings.gamma,
            lam=settings.lam,
        )
        for (i, t), a, g in zip(mine, adv[0].tolist(), ret[0].tolist(), strict=True):
            advantages[i][t], returns[i][t] = a, g
        slots.extend(mine)
    if slots:
        flat = torch.tensor([advantages[i][t] for i, t in slots])
        for (i, t), a in zip(slots, masked_whiten(flat, torch.ones_like(flat)).tolist(), strict=True):
            advantages[i][t] = a
    for i, row in enumerate(rows):
        row.advantages, row.returns, row.old_values = advantages[i], returns[i], [float(v) for v in values[i]]
    n = max(len(slots), 1)
    return {
        "return_mean": sum(returns[i][t] for i, t in slots) / n,
        "old_value_mean": sum(float(values[i][t]) for i, t in slots) / n,
    }

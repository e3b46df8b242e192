"""Losses: small pure functions on torch tensors, readable top to bottom.

Shapes: `[B, T]` per-token tensors over the response positions of B rows, with `mask[B, T]` = 1 on the tokens the
policy chose (the model's own tokens; prompt, observation and padding tokens are 0). Every function is safe on
rows with no loss tokens (no NaN) and never exponentiates values at masked positions.

Aggregation normalises within the tensors it is given. A trainer that splits a batch into micro-batches for
gradient accumulation must weight them (e.g. by their token counts for `token-mean`) to get the full-batch loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor

from rllm.training import off_policy

__all__ = [
    "AGG_MODES",
    "POLICY_LOSSES",
    "actor_loss",
    "aggregate",
    "cispo_loss",
    "dpo_loss",
    "entropy_from_logits",
    "gspo_loss",
    "kl_penalty",
    "policy_loss",
    "sft_loss",
    "token_logprobs",
    "value_loss",
]

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

# exp() of a log-ratio beyond +-20 is ~5e8: the sample is useless either way, and an inf ratio would turn the
# zero gradient of the clipped branch into 0 * inf = NaN in backward. verl clamps at the same bounds.
_LOG_RATIO_BOUND = 20.0


def aggregate(values: Tensor, mask: Tensor, mode: str = "token-mean", norm_length: int | None = None) -> Tensor:
    """Reduce per-token `values[B, T]` to a scalar over the tokens where `mask` is set.

    token-mean               sum of all tokens / number of tokens in the batch (DAPO; every token weighs the same,
                             so long responses are not down-weighted)
    seq-mean-token-mean      mean over rows of (row sum / row length) (original GRPO; each row weighs the same,
                             so a token in a long row weighs less -- the length bias Dr.GRPO points out)
    seq-mean-token-sum       mean over rows of row sum
    seq-mean-token-sum-norm  mean over rows of (row sum / norm_length), norm_length a constant horizon such as the
                             max response length (Dr.GRPO, Liu et al. 2025). Default: T, the padded width -- pass
                             a fixed value so the scale does not move with each batch's longest response.
                             (verl 0.9.1 computes the same: the mean over rows with a loss token of row sum / T, or
                             / its `loss_scale_factor`; its releases of early 2025 divided the sum over rows by T,
                             without the mean over rows.)

    "Mean over rows" counts only rows with at least one loss token, so an all-masked row (an infra-error rollout
    kept for shape, a padding row) neither yields NaN nor dilutes the mean. No loss tokens at all gives 0.
    """
    mask = mask.to(values.dtype)
    masked = torch.where(mask > 0, values, torch.zeros_like(values)) * mask
    row_tokens = mask.sum(-1)
    rows = (row_tokens > 0).to(values.dtype)
    if mode == "token-mean":
        return masked.sum() / mask.sum().clamp(min=1)
    if mode == "seq-mean-token-sum":
        row_loss = masked.sum(-1)
    elif mode == "seq-mean-token-mean":
        row_loss = masked.sum(-1) / row_tokens.clamp(min=1)
    elif mode == "seq-mean-token-sum-norm":
        row_loss = masked.sum(-1) / (norm_length or values.shape[-1])
    else:
        raise ValueError(f"unknown aggregation mode {mode!r}; choose from {AGG_MODES}")
    return (row_loss * rows).sum() / rows.sum().clamp(min=1)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "token-mean",
    norm_length: int | None = None,
    dual_clip: float | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017) with asymmetric clipping (DAPO clip-higher, Yu et al. 2025).

        ratio = exp(logprobs - old_logprobs)
        loss  = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))      per token, then `aggregate`

    `old_logprobs` are the log-probs the tokens were *sampled* with (what the rollout reported), so the ratio is the
    importance weight of the current policy against the behaviour policy. A raised `clip_high` (DAPO: 0.28) lets
    unlikely tokens with positive advantage grow faster, against entropy collapse.
    Dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL"; verl `clip_ratio_c`): for
    A < 0 the pessimistic max() is unbounded as the ratio grows; cap it at `-A * dual_clip` (dual_clip > 1, e.g. 3).
    advantages are [B, T] (broadcast a per-row advantage with `adv[:, None]`). `weights` [B, T] (detached importance
    weights, `rllm.training.off_policy`) multiply each token's clipped loss.
    Metrics (detached 0-dim tensors, masked means; no host sync): clip_fraction (tokens whose clipped branch is
    active), dual_clip_fraction, approx_kl (k3 estimate of KL(old || new) = mean(ratio - 1 - log ratio), as CleanRL
    logs it), ratio_mean, ratio_max.
    """
    m = mask.to(torch.bool)
    # Masked positions hold garbage (padding, prompt): force their log-ratio to 0 before exp() can overflow.
    log_ratio = torch.where(m, logprobs - old_logprobs, torch.zeros_like(logprobs))
    log_ratio = log_ratio.clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    dual_clipped = torch.zeros_like(m)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        cap = -advantages * dual_clip
        dual_clipped = (advantages < 0) & (per_token > cap)
        per_token = torch.where(dual_clipped, cap, per_token)
    if weights is not None:
        per_token = per_token * weights
    loss = aggregate(per_token, mask, agg, norm_length)

    return loss, _ratio_metrics(m, log_ratio, ratio, clipped > unclipped, dual_clipped)


@torch.no_grad()
def _ratio_metrics(
    m: Tensor, log_ratio: Tensor, ratio: Tensor, clipped: Tensor, dual_clipped: Tensor | None = None
) -> dict[str, Tensor]:
    """Masked means over the loss tokens (no host sync): clip_fraction (`clipped` tokens), dual_clip_fraction,
    approx_kl (k3 of KL(old || new) from the per-token log-ratio), ratio_mean and ratio_max (of `ratio`)."""
    n = m.sum().clamp(min=1)
    return {
        "clip_fraction": (clipped & m).sum() / n,
        "dual_clip_fraction": (dual_clipped & m).sum() / n if dual_clipped is not None else torch.zeros(()),
        "approx_kl": torch.where(m, log_ratio.exp() - 1 - log_ratio, 0.0).sum() / n,
        "ratio_mean": torch.where(m, ratio, 0.0).sum() / n,
        "ratio_max": torch.where(m, ratio, 0.0).max() if m.numel() else ratio.new_zeros(()),
    }


def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    agg: str = "seq-mean-token-mean",
    norm_length: int | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO, Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071; verl `policy_loss=gspo`): the
    importance ratio and its clipping are per sequence (a training row), not per token.

        s_i     = exp(mean_t (logprobs - old_logprobs))          over row i's loss tokens
        s_i,t   = sg[s_i] * pi(y_t) / sg[pi(y_t)]                 (GSPO-token: value s_i, gradient of log pi(y_t))
        loss    = max(-A * s_i,t, -A * clip(s_i,t, 1 - clip_low, 1 + clip_high))   per token, then `aggregate`

    With one advantage per row this is GSPO's sequence objective. The sequence ratio stays close to 1, so the clip
    range is three orders of magnitude below PPO's (the paper: 3e-4 / 4e-4), and the paper aggregates per sequence
    (`seq-mean-token-mean`). The log-ratio is capped at 10 before exp(), as verl does. Metrics as `policy_loss`,
    `ratio_mean` / `ratio_max` over the rows' sequence ratios.
    """
    m = mask.to(torch.bool)
    log_ratio = torch.where(m, logprobs - old_logprobs, torch.zeros_like(logprobs)).clamp(
        -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND
    )
    sequence = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    current = torch.where(m, logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp((current - current.detach() + sequence.detach()[:, None]).clamp(max=10.0))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if weights is not None:
        per_token = per_token * weights
    loss = aggregate(per_token, mask, agg, norm_length)
    # ratio metrics of the rows' sequence ratios (each row's tokens share it; a row counts once)
    first = m & (m.cumsum(-1) == 1)
    metrics = _ratio_metrics(m, log_ratio, ratio.detach(), clipped > unclipped)
    metrics.update(
        {
            k: v
            for k, v in _ratio_metrics(first, log_ratio, ratio.detach(), first).items()
            if k in ("ratio_mean", "ratio_max")
        }
    )
    return loss, metrics


def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    agg: str = "token-mean",
    norm_length: int | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO, clipped importance-sampling-weight policy optimization (MiniMax 2025, "MiniMax-M1", arXiv 2506.13585;
    verl `policy_loss=cispo`): REINFORCE whose per-token importance weight is clipped and detached.

        w     = sg[clip(exp(logprobs - old_logprobs), 1 - clip_low, 1 + clip_high)]
        loss  = -w * A * logprobs                                  per token, then `aggregate`

    Unlike PPO's clip, which zeroes the gradient of a token whose ratio left the range, every token keeps a
    gradient (bounded by the clipped weight): rare tokens that matter, such as a reflective "wait", are not dropped
    from the update. MiniMax-M1 clips only from above: a `clip_low` near 1 (e.g. 0.99) does the same here.
    Metrics as `policy_loss` (clip_fraction: tokens whose weight was clipped).
    """
    m = mask.to(torch.bool)
    log_ratio = torch.where(m, logprobs - old_logprobs, torch.zeros_like(logprobs)).clamp(
        -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND
    )
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high).detach()
    per_token = -weight * advantages * torch.where(m, logprobs, torch.zeros_like(logprobs))
    if weights is not None:
        per_token = per_token * weights
    loss = aggregate(per_token, mask, agg, norm_length)
    return loss, _ratio_metrics(m, log_ratio, ratio, weight != ratio)


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi (Schulman 2020, "Approximating KL
    Divergence"). With d = logprobs - ref_logprobs = log(pi / pi_ref):

        k1 = d                          unbiased, high variance, can be negative      (verl "kl")
        k2 = d^2 / 2                    biased, low variance                          (verl "mse")
        k3 = exp(-d) - 1 + d            unbiased, low variance, always >= 0           (verl "low_var_kl")

    k3 is computed as verl does for stability: -d is clamped to [-20, 20] before exp() and the result to
    [-10, 10] (k3 >= 0, so in effect <= 10). The caller aggregates with `aggregate` and a coefficient.
    Gradients, when used as a loss on on-policy samples (differentiating k at fixed samples): E[grad k1] = 0;
    grad k2 is the true gradient of KL(pi || pi_ref); grad k3 is the gradient of the *forward* KL(pi_ref || pi).
    The values above are estimates of KL(pi || pi_ref) either way.
    """
    d = logprobs - ref_logprobs
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d.square()
    if kind == "k3":
        neg = torch.clamp(-d, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
        return torch.clamp(torch.exp(neg) - neg - 1.0, -10.0, 10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; choose from k1, k2, k3")


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of softmax(logits) over the last axis, [B, T, V] -> [B, T]: `H = -sum_v p_v log p_v`.

    log p comes from `log_softmax` (max-shifted logsumexp), never from the log of a probability, so there is no
    log 0 and no overflow; the algebraically equal `logsumexp(z) - sum p z` loses ~1e-3 to cancellation in float32
    once logits reach ~1e4. Logits of -inf (a filtered vocabulary) have p = 0 and are skipped, not 0 * inf = NaN.
    """
    logp = torch.log_softmax(logits, dim=-1)
    probs = logp.exp()
    return -(probs * torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))).sum(-1)


def token_logprobs(logits: Tensor, target_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature)[target]: [B, T, V] logits, [B, T] ids -> [B, T] (float32).

    `logits[:, t]` must be the logits that predicted `target_ids[:, t]` (the caller shifts by one). A rollout that
    samples at temperature T draws from softmax(logits / T) and that is the behaviour policy whose log-probs it
    reports; the training forward pass must divide by the same T, or the PPO ratio compares two different
    distributions and is != 1 even before any update (verl divides the same way). The rollout side must report
    *processed* log-probs for this to hold: vLLM V1 reports raw (pre-temperature) ones unless started with
    `logprobs_mode="processed_logprobs"`. Computed in float32 as gather - logsumexp (no [B, T, V] log-softmax
    tensor); bf16 log-probs would add noise of ~1e-2 to every ratio.
    """
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    picked = torch.gather(logits, -1, target_ids.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float | None = 0.2,
    agg: str = "token-mean",
    norm_length: int | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped value loss of PPO (as in OpenAI baselines, CleanRL `clip_vloss`, verl `cliprange_value`).

        v_clip = old_values + clip(values - old_values, -clip, clip)
        loss   = 1/2 * max((values - returns)^2, (v_clip - returns)^2)      per token, then `aggregate`

    The critic may not move a prediction more than `clip` away from the value it had at rollout time unless that
    makes the error smaller; `clip=None` is the plain 1/2 squared error. Metrics: value_clip_fraction (tokens where
    the clipped error is the larger one, i.e. the one used).
    """
    unclipped = (values - returns).square()
    if clip is None:
        per_token, used_clipped = unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    else:
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
        clipped = (v_clip - returns).square()
        per_token, used_clipped = torch.maximum(unclipped, clipped), clipped > unclipped
    loss = 0.5 * aggregate(per_token, mask, agg, norm_length)
    with torch.no_grad():
        m = mask.to(torch.bool)
        fraction = (used_clipped & m).sum() / m.sum().clamp(min=1)
    return loss, {"value_clip_fraction": fraction.detach()}


def actor_loss(
    logprobs: Tensor,
    entropy: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    algorithm: Any,
    *,
    norm_length: int | None = None,
    ref_logprobs: Tensor | None = None,
    behaviour_logprobs: Tensor | None = None,
    row_roles: Sequence[str] | None = None,
) -> tuple[Tensor, dict[str, float], dict[str, float]]:
    """The policy's loss on one micro-batch, aggregated over itself, as every training backend computes it:

        loss = pg_loss + kl_coef * kl - entropy_coef * entropy

    `algorithm` is an `AlgorithmConfig` (policy_loss: ppo, gspo or cispo; clip_low/high, dual_clip, loss_agg,
    kl_coef/kind, entropy_coef);
    `ref_logprobs` are needed when kl_coef > 0. Returns the loss and, for the log, its aggregated parts (pg_loss,
    loss) and per-token means (clip_fraction, approx_kl, dual_clip_fraction, entropy, kl). Entropy carries a
    gradient only if the caller computed it with one (it should when entropy_coef > 0).

    Off-policy (`algorithm.off_policy`, see `rllm.training.off_policy`): `old_logprobs` anchor the PPO ratio -- the
    sampler's in bypass mode, the trainer's recomputed ones in decoupled mode, where `behaviour_logprobs` are the
    sampler's and every token's loss is weighted by the truncated pi_prox / pi_sampler. Tokens whose old or behaviour
    log-prob is not finite leave the loss (the caller counts them); a non-finite *current* log-prob is not masked:
    it reaches the gradient norm, which skips the optimizer step and says so.

    Per role: `row_roles` (each row's trajectory name) gives each row the policy loss, clip_low and clip_high of
    `algorithm.for_role(role)` (`algorithm.roles`); the rows of each setting form one group, whose loss is
    aggregated over its own tokens (or rows) and weighted by its share of the micro-batch's -- exactly the aggregate
    over all rows, since `aggregate` is a sum divided by a count. Everything else (loss_agg, KL, entropy) is
    `algorithm`'s. The ratio metrics are the groups' token-weighted means (ratio_max: the largest).
    """
    mask, weights, is_metrics = _off_policy_mask(logprobs, old_logprobs, behaviour_logprobs, mask, algorithm)
    agg = partial(aggregate, mask=mask, mode=algorithm.loss_agg, norm_length=norm_length)
    pg_loss, token_means = _grouped_policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        mask,
        algorithm,
        norm_length=norm_length,
        weights=weights,
        row_roles=row_roles,
    )
    loss = pg_loss
    losses = {"pg_loss": pg_loss.item()}
    token_means["entropy"] = masked_token_mean(entropy, mask)
    token_means.update({f"off_policy/{k}": v.item() for k, v in is_metrics.items()})
    if algorithm.kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("algorithm.kl_coef > 0 needs the reference policy's log-probs")
        kl = kl_penalty(logprobs, ref_logprobs, algorithm.kl_kind)
        loss = loss + algorithm.kl_coef * agg(kl)
        token_means["kl"] = masked_token_mean(kl, mask)
    if algorithm.entropy_coef > 0:
        loss = loss - algorithm.entropy_coef * agg(entropy)
    losses["loss"] = loss.item()
    return loss, losses, token_means


POLICY_LOSSES = {"ppo": policy_loss, "gspo": gspo_loss, "cispo": cispo_loss}  # `algorithm.policy_loss`


def _grouped_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    algorithm: Any,
    *,
    norm_length: int | None,
    weights: Tensor | None,
    row_roles: Sequence[str] | None,
) -> tuple[Tensor, dict[str, float]]:
    """The policy-gradient loss of rows whose roles may choose different policy losses (`actor_loss`), and the
    token means of its ratio metrics."""
    groups = _policy_groups(algorithm, row_roles, mask)
    units, tokens = _agg_units(mask, algorithm.loss_agg).clamp(min=1), mask.sum().clamp(min=1)
    pg_loss, metrics = None, dict.fromkeys(_RATIO_METRICS, 0.0)
    for settings, group_mask in groups:
        options = {"dual_clip": settings.dual_clip} if settings.policy_loss == "ppo" else {}
        loss, pg = POLICY_LOSSES[settings.policy_loss](
            logprobs,
            old_logprobs,
            advantages,
            group_mask,
            clip_low=settings.clip_low,
            clip_high=settings.clip_high,
            agg=algorithm.loss_agg,
            norm_length=norm_length,
            weights=weights,
            **options,
        )
        if len(groups) == 1:
            return loss, {k: pg[k].item() for k in _RATIO_METRICS}
        loss = loss * (_agg_units(group_mask, algorithm.loss_agg) / units)
        pg_loss = loss if pg_loss is None else pg_loss + loss
        for key in _RATIO_METRICS:
            metrics[key] += (pg[key] * group_mask.sum() / tokens).item()
    return pg_loss, metrics


_RATIO_METRICS = ("clip_fraction", "approx_kl", "dual_clip_fraction")


def _policy_groups(algorithm: Any, row_roles: Sequence[str] | None, mask: Tensor) -> list[tuple[Any, Tensor]]:
    """(settings, mask of its rows) per distinct policy-loss setting among the rows' roles; one group, with the
    whole mask, when no role overrides the policy loss."""
    if row_roles is None or not algorithm.roles_override_policy_loss():
        return [(algorithm, mask)]
    if len(row_roles) != mask.shape[0]:
        raise ValueError(f"row_roles names {len(row_roles)} rows, the micro-batch has {mask.shape[0]}")
    rows_of: dict[tuple, list[int]] = {}
    settings_of: dict[tuple, Any] = {}
    for index, role in enumerate(row_roles):
        settings = algorithm.for_role(role)
        key = (settings.policy_loss, settings.clip_low, settings.clip_high, settings.dual_clip)
        rows_of.setdefault(key, []).append(index)
        settings_of[key] = settings
    groups = []
    for key, rows in rows_of.items():
        selected = torch.zeros(mask.shape[0], dtype=mask.dtype, device=mask.device)
        selected[rows] = 1
        groups.append((settings_of[key], mask * selected[:, None]))
    return groups


def _agg_units(mask: Tensor, agg: str) -> Tensor:
    """What `aggregate` divides by: loss tokens (token-mean) or rows holding one (seq-mean-*)."""
    return mask.sum() if agg == "token-mean" else (mask.sum(-1) > 0).sum().to(mask.dtype)


def _off_policy_mask(
    logprobs: Tensor, old_logprobs: Tensor, behaviour_logprobs: Tensor | None, mask: Tensor, algorithm: Any
) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
    """The loss mask without non-finite old/behaviour tokens and without what `algorithm.off_policy` masks, the
    importance weights (decoupled mode) and their metrics. All finite and no correction: `mask` unchanged."""
    finite = torch.isfinite(old_logprobs)
    if behaviour_logprobs is not None:
        finite = finite & torch.isfinite(behaviour_logprobs)
    mask = mask * finite.to(mask.dtype)
    settings = getattr(algorithm, "off_policy", None)
    if settings is None or settings.is_level is None:
        return mask, None, {}
    decoupled = settings.mode == "decoupled"
    if decoupled and behaviour_logprobs is None:
        raise ValueError(
            "algorithm.off_policy.mode=decoupled needs the sampler's log-probs (behaviour_logprobs) "
            "beside the recomputed old_logprobs"
        )
    behaviour = behaviour_logprobs if decoupled else old_logprobs
    target = old_logprobs if decoupled else logprobs.detach()  # bypass: pi_theta / pi_sampler, at this forward
    log_ratio = torch.where(mask > 0, target - behaviour, torch.zeros_like(target))
    weights, keep, metrics = off_policy.importance_weights(
        log_ratio, mask, level=settings.is_level, mode=settings.is_mode, low=settings.is_low, high=settings.is_high
    )
    metrics.pop("nonfinite_tokens")  # non-finite tokens were masked above: the backend counts them
    return mask * keep.to(mask.dtype), weights if decoupled else None, metrics


DPO_LOSSES = ("sigmoid", "ipo", "hinge")


def dpo_loss(
    chosen: Tensor,
    rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    *,
    beta: float,
    kind: str = "sigmoid",
    chosen_tokens: Tensor | None = None,
    rejected_tokens: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Direct preference optimisation over P pairs: `chosen`/`rejected` are the policy's log-probabilities of each
    side (summed over its trained tokens, `[P]`), `ref_*` the reference's. With log-ratios c = chosen - ref_chosen,
    r = rejected - ref_rejected (TRL's `DPOTrainer` definitions, mean over pairs):

    sigmoid  -log sigmoid(beta * (c - r))                                  (DPO, Rafailov et al. 2023)
    ipo      (c / chosen_tokens - r / rejected_tokens - 1 / (2 beta))^2    (IPO, per-token log-ratios as in TRL)
    hinge    max(0, 1 - beta * (c - r))                                    (SLiC)

    Returns the loss and, detached, TRL's metrics: rewards (beta * log-ratio) of each side, their margin, the
    fraction of pairs whose chosen reward is higher, and the policy's log-probabilities."""
    chosen_ratio, rejected_ratio = chosen - ref_chosen, rejected - ref_rejected
    if kind == "sigmoid":
        per_pair = -torch.nn.functional.logsigmoid(beta * (chosen_ratio - rejected_ratio))
    elif kind == "hinge":
        per_pair = torch.relu(1 - beta * (chosen_ratio - rejected_ratio))
    elif kind == "ipo":
        if chosen_tokens is None or rejected_tokens is None:
            raise ValueError("the ipo loss needs each side's number of trained tokens")
        delta = chosen_ratio / chosen_tokens.clamp(min=1) - rejected_ratio / rejected_tokens.clamp(min=1)
        per_pair = (delta - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"unknown DPO loss {kind!r}; choose from {DPO_LOSSES}")
    chosen_reward, rejected_reward = beta * chosen_ratio.detach(), beta * rejected_ratio.detach()
    metrics = {
        "rewards/chosen": chosen_reward.mean(),
        "rewards/rejected": rejected_reward.mean(),
        "rewards/margins": (chosen_reward - rejected_reward).mean(),
        "rewards/accuracies": (chosen_reward > rejected_reward).float().mean(),
        "logps/chosen": chosen.detach().mean(),
        "logps/rejected": rejected.detach().mean(),
    }
    return per_pair.mean(), metrics


def sft_loss(logprobs: Tensor, mask: Tensor) -> Tensor:
    """Supervised fine-tuning: the mean negative log-likelihood of the masked tokens (`token-mean`, as TRL's
    `SFTTrainer` reduces it: every trained token of the batch weighs the same)."""
    return aggregate(-logprobs, mask, "token-mean")


def masked_token_mean(values: Tensor, mask: Tensor) -> float:
    """Mean of `values` over the tokens where `mask` is 1 (0.0 when there are none), as a float for the log."""
    return float((values.detach() * mask).sum() / mask.sum().clamp(min=1))

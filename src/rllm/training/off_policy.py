"""Off-policy corrections and train-inference mismatch: small pure functions on `[B, T]` token tensors.

Three policies can be involved in one update (Hilton et al. 2022 "Batch size-invariance for policy optimization",
the "decoupled PPO" that AReaL trains with):

    pi_behaviour   what the sampler (LocalModel, vLLM) used: the log-probs it reported with each token
    pi_old         the anchor of the PPO ratio and its clip
    pi_theta       the weights being trained

`algorithm.off_policy.mode` picks pi_old (verl calls the same two modes `algorithm.rollout_correction.bypass_mode`):

    bypass     pi_old = pi_behaviour. The PPO ratio pi_theta / pi_behaviour is itself the importance weight, so the
               only correction left is masking (`is_mode: mask`), computed on the fly from that ratio.
    decoupled  pi_old = pi_prox, the trainer's own log-probs recomputed before the update (one more forward pass).
               The ratio pi_theta / pi_prox is clipped as usual and every token's loss is multiplied by the detached
               importance weight w = pi_prox / pi_behaviour, truncated or masked.

`importance_weights` turns a log-ratio into those weights at one of three levels (`is_level`):

    token       w_t = exp(d_t)                          (TIS: Yao et al. 2025, "Your efficient RL framework secretly
                                                          brings you off-policy RL training"; slime --use-tis)
    sequence    w_t = exp(sum_t d_t) for every t         (the unbiased sequence ratio; high variance)
    geometric   w_t = exp(mean_t d_t) for every t        (the geometric mean, length-normalised)

and applies `is_mode`:

    truncate    w <- min(w, high) (and max(w, low) when `low` is set): truncated importance sampling
    mask        tokens (token level) or whole rows (sequence, geometric) whose w is outside [low, high] leave the
                loss; the rest keep weight 1 (IcePop: Ling team 2025; masked IS, MIS, as in slime's mis.py)

A non-finite log-ratio (a NaN or infinite sampler log-prob) is never exponentiated into the loss: that token (or its
whole row, at the sequence levels) is masked and counted in `nonfinite_tokens`.

With no staleness and equal log-probs every d_t is 0.0, every weight exactly 1.0 and nothing is masked, so the loss
is bitwise the on-policy loss.

`mismatch_sums` measures the gap between the sampler's log-probs and the trainer's recomputed ones for the same
tokens: what a float32 LocalModel keeps at rounding level and a bf16 or vLLM sampler does not.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "IS_LEVELS",
    "IS_MODES",
    "MISMATCH_KEYS",
    "importance_weights",
    "merge_mismatch_sums",
    "mismatch_metrics",
    "mismatch_sums",
]

IS_LEVELS = ("token", "sequence", "geometric")
IS_MODES = ("truncate", "mask")

# exp() beyond +-20 is ~5e8 either way; the same bound as the PPO ratio (losses._LOG_RATIO_BOUND) and verl's.
_LOG_BOUND = 20.0


def importance_weights(
    log_ratio: Tensor,
    mask: Tensor,
    *,
    level: str = "token",
    mode: str = "truncate",
    low: float | None = None,
    high: float = 2.0,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Detached importance weights from `log_ratio[B, T]` = log(pi_target / pi_behaviour) on the tokens of `mask`.

    Returns `(weights, keep, metrics)`: `weights[B, T]` (1.0 off `keep`), `keep[B, T]` (bool: the tokens of `mask`
    that stay in the loss) and 0-dim tensors: `is_weight_mean` / `is_weight_max` (raw weights over the finite tokens,
    before truncation), `is_truncated_fraction` (tokens whose weight was truncated), `is_masked_fraction` (tokens of
    `mask` dropped, non-finite ones included), `nonfinite_tokens` (a count). For `mode="mask"`, `low` defaults to
    1 / high.
    """
    if level not in IS_LEVELS:
        raise ValueError(f"unknown importance-sampling level {level!r}; choose from {IS_LEVELS}")
    if mode not in IS_MODES:
        raise ValueError(f"unknown importance-sampling mode {mode!r}; choose from {IS_MODES}")
    if mode == "mask" and low is None:
        low = 1.0 / high
    log_ratio = log_ratio.detach().float()
    m = mask.to(torch.bool)
    finite = torch.isfinite(log_ratio)
    bad = m & ~finite
    d = torch.where(m & finite, log_ratio, torch.zeros_like(log_ratio))
    if level == "token":
        per_token, usable = d, m & finite
    else:
        row_ok = ~bad.any(-1, keepdim=True)  # one non-finite token spoils its whole row's ratio
        per_row = d.sum(-1, keepdim=True)
        if level == "geometric":
            per_row = per_row / m.sum(-1, keepdim=True).clamp(min=1)
        per_token, usable = per_row.expand_as(d), m & row_ok
    raw = torch.exp(per_token.clamp(-_LOG_BOUND, _LOG_BOUND))
    if mode == "truncate":
        weights = raw.clamp(min=low, max=high) if low is not None else raw.clamp(max=high)
        keep = usable
        truncated = keep & (weights != raw)
    else:
        keep = usable & (raw >= low) & (raw <= high)
        weights = torch.ones_like(raw)
        truncated = torch.zeros_like(keep)
    weights = torch.where(keep, weights, torch.ones_like(weights))
    n = m.sum().clamp(min=1)
    n_finite = (m & finite).sum().clamp(min=1)
    metrics = {
        "is_weight_mean": torch.where(m & finite, raw, 0.0).sum() / n_finite,
        "is_weight_max": torch.where(m & finite, raw, 0.0).max() if raw.numel() else raw.new_zeros(()),
        "is_truncated_fraction": truncated.sum() / n,
        "is_masked_fraction": (m & ~keep).sum() / n,
        "nonfinite_tokens": bad.sum().float(),
    }
    return weights, keep, metrics


# The keys of `mismatch_metrics`, each prefixed with "mismatch/" in the step's metrics.
MISMATCH_KEYS = ("abs_diff_mean", "abs_diff_max", "kl_k1", "kl_k3", "frac_beyond", "tokens")
# The entries of a `mismatch_sums` tensor, in order (named where they travel as separate numbers: verl's metrics).
MISMATCH_SUM_KEYS = ("tokens", "abs_sum", "abs_max", "k1_sum", "k3_sum", "beyond")


def mismatch_sums(trainer_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, *, threshold: float) -> Tensor:
    """Summable statistics of d = trainer - sampler log-prob over the finite tokens of `mask`, as one float64 tensor
    `[tokens, sum |d|, max |d|, sum k1, sum k3, count |d| > threshold]` (add the sums of several micro-batches, take
    the max of the max; `mismatch_metrics` turns them into means).

    The tokens were drawn from the sampler, so KL(sampler || trainer) is estimated on them with Schulman's estimators
    of r = p_trainer / p_sampler: k1 = -log r = -d, k3 = r - 1 - log r (unbiased and >= 0)."""
    d = trainer_logprobs.detach().double() - sampler_logprobs.detach().double()
    ok = mask.to(torch.bool) & torch.isfinite(d)
    d = torch.where(ok, d, torch.zeros_like(d))
    k3 = torch.exp(d.clamp(-_LOG_BOUND, _LOG_BOUND)) - 1.0 - d
    return torch.stack(
        [
            ok.sum().double(),
            d.abs().sum(),
            d.abs().max() if d.numel() else d.new_zeros(()),
            (-d).sum(),
            torch.where(ok, k3, torch.zeros_like(k3)).sum(),
            (ok & (d.abs() > threshold)).sum().double(),
        ]
    )


def merge_mismatch_sums(total: Tensor | None, part: Tensor) -> Tensor:
    """Combine two `mismatch_sums` results (sums add, the max is a max)."""
    if total is None:
        return part.clone()
    merged = total + part
    merged[2] = torch.maximum(total[2], part[2])
    return merged


def mismatch_metrics(sums: Tensor | None) -> dict[str, float]:
    """`mismatch_sums` (possibly merged) as the step's `mismatch/*` metrics; empty when nothing was measured."""
    if sums is None or sums[0] == 0:
        return {}
    tokens, abs_sum, abs_max, k1, k3, beyond = (float(x) for x in sums)
    values = {
        "abs_diff_mean": abs_sum / tokens,
        "abs_diff_max": abs_max,
        "kl_k1": k1 / tokens,
        "kl_k3": k3 / tokens,
        "frac_beyond": beyond / tokens,
        "tokens": tokens,
    }
    return {f"mismatch/{key}": values[key] for key in MISMATCH_KEYS}

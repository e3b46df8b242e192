"""Off-policy corrections (`rllm.training.off_policy`, `algorithm.off_policy`): importance weights and masks on
hand-computed numbers, exact on-policy equivalence when nothing is stale, non-finite log-probs, the mismatch metric,
and a deliberately lagged policy (rows sampled at version 0, trained at version 2) through the torch backend."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rllm.config import AlgorithmConfig, ConfigError, OffPolicyConfig, load_config
from rllm.training.losses import actor_loss
from rllm.training.off_policy import importance_weights, merge_mismatch_sums, mismatch_metrics, mismatch_sums
from tests.support.backends import make_backend, sample_rows

NAN, INF = float("nan"), float("inf")
LOG_RATIO = torch.tensor([[0.0, 0.5, -1.0, 0.0], [0.1, 0.3, 0.2, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])


def test_token_level_truncation_cuts_weights_above_the_bound():
    weights, keep, metrics = importance_weights(LOG_RATIO, MASK, level="token", mode="truncate", high=1.5)
    expected = [
        [1.0, 1.5, math.exp(-1.0), 1.0],
        [math.exp(0.1), 1.5 if math.exp(0.3) > 1.5 else math.exp(0.3), math.exp(0.2), 1.0],
    ]
    assert torch.allclose(weights, torch.tensor(expected))
    assert keep.tolist() == MASK.bool().tolist()  # truncation keeps every token
    assert metrics["is_truncated_fraction"].item() == pytest.approx(1 / 6)  # only exp(0.5) = 1.65 > 1.5
    assert metrics["is_weight_max"].item() == pytest.approx(math.exp(0.5))


def test_truncation_with_a_lower_bound_raises_small_weights():
    weights, _, _ = importance_weights(LOG_RATIO, MASK, level="token", mode="truncate", low=0.5, high=2.0)
    assert weights[0, 2].item() == pytest.approx(0.5)  # exp(-1) = 0.37 -> 0.5


def test_token_level_masking_drops_tokens_outside_the_band_and_keeps_weight_one():
    weights, keep, metrics = importance_weights(LOG_RATIO, MASK, level="token", mode="mask", high=1.5)
    # band [1/1.5, 1.5]: exp(0.5) = 1.65 and exp(-1) = 0.37 fall out
    assert keep.tolist() == [[True, False, False, False], [True, True, True, False]]
    assert torch.equal(weights, torch.ones_like(weights))
    assert metrics["is_masked_fraction"].item() == pytest.approx(2 / 6)


def test_sequence_and_geometric_levels_weigh_a_whole_row():
    weights, keep, _ = importance_weights(LOG_RATIO, MASK, level="sequence", mode="truncate", high=10.0)
    assert torch.allclose(weights[0, :3], torch.full((3,), math.exp(-0.5)))  # 0 + 0.5 - 1
    assert torch.allclose(weights[1, :3], torch.full((3,), math.exp(0.6)))
    weights, keep, _ = importance_weights(LOG_RATIO, MASK, level="geometric", mode="mask", high=1.15)
    # geometric means exp(-0.5 / 3) = 0.85 and exp(0.2) = 1.22; band [0.87, 1.15]: both rows fall out
    assert not keep.any()
    weights, keep, _ = importance_weights(LOG_RATIO, MASK, level="geometric", mode="mask", high=1.25)
    assert keep.tolist() == [[True, True, True, False], [True, True, True, False]]


def test_non_finite_log_ratios_are_masked_and_counted_never_exponentiated():
    log_ratio = torch.tensor([[0.0, NAN, 0.1], [INF, 0.0, 0.0], [0.0, 0.0, NAN]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0]])  # the last NaN is off the mask: not counted
    weights, keep, metrics = importance_weights(log_ratio, mask, level="token", mode="truncate")
    assert keep.tolist() == [[True, False, True], [False, True, True], [True, True, False]]
    assert metrics["nonfinite_tokens"].item() == 2 and torch.isfinite(weights).all()
    _, keep, _ = importance_weights(log_ratio, mask, level="sequence", mode="truncate")
    assert keep.tolist() == [[False] * 3, [False] * 3, [True, True, False]]  # one bad token spoils its row


ALGORITHMS = [
    OffPolicyConfig(mode="decoupled", is_level=level, is_mode=mode)
    for level in ("token", "sequence", "geometric")
    for mode in ("truncate", "mask")
] + [OffPolicyConfig(mode="bypass", is_level=level, is_mode="mask") for level in ("token", "sequence")]


@pytest.mark.parametrize("settings", ALGORITHMS, ids=lambda s: f"{s.mode}-{s.is_level}-{s.is_mode}")
def test_with_equal_logprobs_every_correction_is_the_on_policy_loss_bitwise(settings):
    generator = torch.Generator().manual_seed(0)
    logprobs = -torch.rand(3, 5, generator=generator)
    old = logprobs.clone()
    advantages = torch.randn(3, 5, generator=generator)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1], [1, 0, 1, 0, 1]], dtype=torch.float32)
    entropy = torch.rand(3, 5, generator=generator)
    plain, plain_parts, _ = actor_loss(logprobs, entropy, old, advantages, mask, AlgorithmConfig())
    behaviour = old.clone() if settings.mode == "decoupled" else None
    loss, parts, means = actor_loss(
        logprobs, entropy, old, advantages, mask, AlgorithmConfig(off_policy=settings), behaviour_logprobs=behaviour
    )
    assert torch.equal(loss, plain) and parts == plain_parts
    assert means["off_policy/is_weight_mean"] == 1.0 and means["off_policy/is_masked_fraction"] == 0.0


def test_decoupled_truncated_is_weights_scale_each_tokens_loss():
    """token TIS, hand-computed: pi_prox = pi_theta (ratio 1, no clip), so each token's loss is -A * w."""
    logprobs = torch.tensor([[-1.0, -2.0]])
    behaviour = torch.tensor([[-1.5, -1.0]])  # w = exp(0.5) = 1.65, exp(-1) = 0.37
    advantages, mask = torch.tensor([[1.0, 1.0]]), torch.ones(1, 2)
    settings = OffPolicyConfig(mode="decoupled", is_level="token", is_mode="truncate", is_high=1.5)
    loss, _, _ = actor_loss(
        logprobs,
        torch.zeros(1, 2),
        logprobs.clone(),
        advantages,
        mask,
        AlgorithmConfig(off_policy=settings),
        behaviour_logprobs=behaviour,
    )
    assert loss.item() == pytest.approx(-(1.5 + math.exp(-1.0)) / 2)


def test_mismatch_sums_merge_and_summarise():
    trainer = torch.tensor([[-1.0, -2.0, -3.0]])
    sampler = torch.tensor([[-1.0, -2.5, NAN]])
    first = mismatch_sums(trainer, sampler, torch.ones(1, 3), threshold=0.2)
    second = mismatch_sums(torch.tensor([[0.0]]), torch.tensor([[-0.1]]), torch.ones(1, 1), threshold=0.2)
    metrics = mismatch_metrics(merge_mismatch_sums(merge_mismatch_sums(None, first), second))
    assert metrics["mismatch/tokens"] == 3  # the NaN token is not measured
    assert metrics["mismatch/abs_diff_mean"] == pytest.approx((0 + 0.5 + 0.1) / 3)
    assert metrics["mismatch/abs_diff_max"] == pytest.approx(0.5)
    assert metrics["mismatch/kl_k1"] == pytest.approx(-(0 + 0.5 + 0.1) / 3)
    k3 = [math.exp(d) - 1 - d for d in (0.0, 0.5, 0.1)]
    assert metrics["mismatch/kl_k3"] == pytest.approx(sum(k3) / 3)
    assert metrics["mismatch/frac_beyond"] == pytest.approx(1 / 3)
    assert mismatch_metrics(None) == {}


def test_a_lagged_policy_gives_the_expected_ratios_and_masks(smollm2_tokenizer):
    """Rows sampled at version 0, trained at version 2 (two updates later): the decoupled mode's weights are exactly
    exp(pi_prox - pi_sampler) of the recomputed log-probs, truncated at is_high, and the mask mode drops exactly the
    tokens outside the band."""
    from tests.support.models import sharp_tiny_model

    base = sharp_tiny_model(smollm2_tokenizer)
    backend = make_backend(smollm2_tokenizer, base, lr=5e-2)
    rows = sample_rows(backend, smollm2_tokenizer, [1.0, -1.0, 1.0, -1.0])  # version 0's samples
    for _ in range(2):
        backend.update(copy.deepcopy(rows), temperature=1.0)  # versions 1 and 2
    prox = backend.compute_logprobs(rows, temperature=1.0)
    log_ratio = torch.tensor(
        [
            p - o
            for row, lp in zip(rows, prox, strict=True)
            for p, o, m in zip(lp, row.old_logprobs, row.loss_mask, strict=True)
            if m
        ]
    )
    assert log_ratio.abs().max() > 0.05  # the policy really moved
    ones = torch.ones_like(log_ratio)[None]
    weights, _, _ = importance_weights(log_ratio[None], ones, level="token", mode="truncate", high=1.2)
    assert torch.allclose(weights[0], log_ratio.exp().clamp(max=1.2))
    _, keep, metrics = importance_weights(log_ratio[None], ones, level="token", mode="mask", high=1.2)
    outside = (log_ratio.exp() < 1 / 1.2) | (log_ratio.exp() > 1.2)
    assert torch.equal(keep[0], ~outside) and outside.any()
    assert metrics["is_masked_fraction"].item() == pytest.approx(outside.float().mean().item())

    # and through the backend: the decoupled update reports those same weights and masks
    for mode, key, expected in (
        ("truncate", "is_truncated_fraction", (log_ratio.exp() > 1.2).float().mean()),
        ("mask", "is_masked_fraction", outside.float().mean()),
    ):
        lagged = make_backend(
            smollm2_tokenizer,
            base,
            lr=5e-2,
            off_policy=OffPolicyConfig(mode="decoupled", is_level="token", is_mode=mode, is_high=1.2),
        )
        lagged.load_state_dict(backend.state_dict())
        trained = copy.deepcopy(rows)
        for row, lp in zip(trained, prox, strict=True):
            row.prox_logprobs = lp
        metrics = lagged.update(trained, temperature=1.0)
        assert metrics[f"off_policy/{key}"] == pytest.approx(expected.item(), abs=1e-6)


def test_bypass_mode_refuses_truncation_and_verl_refuses_corrections():
    with pytest.raises(ConfigError, match="off_policy.mode=decoupled"):
        load_config(None, ["algorithm.off_policy.is_level=token", "algorithm.off_policy.is_mode=truncate"])
    with pytest.raises(ConfigError, match="torch backend only"):
        load_config(None, ["trainer.backend=verl", "rollout.max_staleness=1"])

"""Losses against numbers computed by hand (the arithmetic is in the comments); gradients checked with autograd."""

import math

import pytest

torch = pytest.importorskip("torch")

from rllm.config import AlgorithmConfig, ConfigError, load_config
from rllm.training.losses import (
    AGG_MODES,
    actor_loss,
    aggregate,
    cispo_loss,
    entropy_from_logits,
    gspo_loss,
    kl_penalty,
    policy_loss,
    token_logprobs,
    value_loss,
)

T = torch.tensor


def close(actual, expected, atol=1e-5):
    actual = torch.as_tensor(actual)
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def _leaf(values):
    return T(values, dtype=torch.float32, requires_grad=True)


# --- aggregate ---------------------------------------------------------------------------------------------------


def test_aggregate_modes_on_two_partial_rows():
    values = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = T([[1, 1, 0], [1, 0, 0]])
    close(aggregate(values, mask, "token-mean"), 7 / 3)  # (1+2+4) / 3 tokens
    close(aggregate(values, mask, "seq-mean-token-sum"), 3.5)  # rows 3 and 4
    close(aggregate(values, mask, "seq-mean-token-mean"), 2.75)  # rows 3/2 = 1.5 and 4/1 = 4
    close(aggregate(values, mask, "seq-mean-token-sum-norm", norm_length=4), 0.875)  # rows 3/4 and 4/4
    close(aggregate(values, mask, "seq-mean-token-sum-norm"), 7 / 6)  # default horizon T = 3: rows 1 and 4/3


def test_aggregate_all_masked_row_counts_for_nothing_and_makes_no_nan():
    # row 1 has no loss tokens (and NaN garbage): every mode sees only row 0 = [1, _, 3]
    values = _leaf([[1.0, 2.0, 3.0], [float("nan")] * 3])
    mask = T([[1, 0, 1], [0, 0, 0]])
    expected = {
        "token-mean": 2.0,
        "seq-mean-token-sum": 4.0,
        "seq-mean-token-mean": 2.0,
        "seq-mean-token-sum-norm": 4 / 3,
    }  # 4 / 2 tokens; row sum 4; 4/2; 4 / horizon 3
    for mode in AGG_MODES:
        loss = aggregate(values, mask, mode)
        close(loss, expected[mode])
        (grad,) = torch.autograd.grad(loss, values)
        assert torch.isfinite(grad).all() and (grad[1] == 0).all(), mode


def test_aggregate_no_tokens_at_all_is_zero_and_unknown_mode_raises():
    for mode in AGG_MODES:
        close(aggregate(torch.ones(2, 3), torch.zeros(2, 3), mode), 0.0)
    with pytest.raises(ValueError):
        aggregate(torch.ones(1, 1), torch.ones(1, 1), "sum")


# --- policy loss -------------------------------------------------------------------------------------------------


def test_positive_advantage_above_clip_high_is_clipped_with_zero_gradient():
    # token 0: ratio 1.5 > 1 + 0.28 -> loss -1 * 1.28, constant in logprobs -> gradient 0
    # token 1: ratio 1.1 inside the range -> loss -1.1, d/dlp (-A e^lp) = -1.1
    # token-mean: (-1.28 - 1.1) / 2 = -1.19; gradients [0, -1.1 / 2 = -0.55]
    logprobs = _leaf([[math.log(1.5), math.log(1.1)]])
    loss, metrics = policy_loss(
        logprobs, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), clip_low=0.2, clip_high=0.28
    )
    close(loss, -1.19)
    loss.backward()
    close(logprobs.grad, [[0.0, -0.55]])
    close(metrics["clip_fraction"], 0.5)
    close(metrics["ratio_mean"], 1.3)  # (1.5 + 1.1) / 2
    close(metrics["ratio_max"], 1.5)
    # k3 of (old || new): mean(r - 1 - ln r) = ((0.5 - 0.405465) + (0.1 - 0.0953102)) / 2 = 0.0496124
    close(metrics["approx_kl"], 0.0496124)
    assert all(not torch.as_tensor(v).requires_grad for v in metrics.values())


def test_negative_advantage_clip_is_at_one_minus_clip_low_and_pessimistic_above():
    # A = -2 everywhere, clip_low 0.2, clip_high 0.28:
    # ratio 0.7 < 0.8: max(2*0.7, 2*0.8) = 1.6 -> clipped, gradient 0
    # ratio 0.9:      max(1.8, 1.8)     = 1.8 -> gradient d/dlp (2 e^lp) = 1.8
    # ratio 1.5 > 1.28: max(3.0, 2.56)  = 3.0 -> NOT clipped (pessimistic bound), gradient 3.0
    # token-mean: (1.6 + 1.8 + 3.0) / 3 = 2.13333; gradients / 3 = [0, 0.6, 1.0]
    logprobs = _leaf([[math.log(0.7), math.log(0.9), math.log(1.5)]])
    loss, metrics = policy_loss(
        logprobs, torch.zeros(1, 3), torch.full((1, 3), -2.0), torch.ones(1, 3), clip_low=0.2, clip_high=0.28
    )
    close(loss, 6.4 / 3)
    loss.backward()
    close(logprobs.grad, [[0.0, 0.6, 1.0]])
    close(metrics["clip_fraction"], 1 / 3)


def test_positive_advantage_below_one_minus_clip_low_is_not_clipped():
    # A = 1, ratio 0.7: max(-0.7, -0.8) = -0.7 -> unclipped, gradient -0.7
    logprobs = _leaf([[math.log(0.7)]])
    loss, metrics = policy_loss(logprobs, torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1))
    close(loss, -0.7)
    loss.backward()
    close(logprobs.grad, [[-0.7]])
    close(metrics["clip_fraction"], 0.0)


def test_dual_clip_caps_negative_advantage_loss():
    # A = -1, dual_clip 3: ratio 5 -> max(5, 1.2) = 5 > 3 -> capped at 3, gradient 0
    #                      ratio 2 -> max(2, 1.2) = 2 < 3 -> kept, gradient 2
    # token-mean (3 + 2) / 2 = 2.5; gradients [0, 1]
    logprobs = _leaf([[math.log(5.0), math.log(2.0)]])
    loss, metrics = policy_loss(logprobs, torch.zeros(1, 2), -torch.ones(1, 2), torch.ones(1, 2), dual_clip=3.0)
    close(loss, 2.5)
    loss.backward()
    close(logprobs.grad, [[0.0, 1.0]])
    close(metrics["dual_clip_fraction"], 0.5)
    # without dual clip: (5 + 2) / 2
    close(policy_loss(logprobs, torch.zeros(1, 2), -torch.ones(1, 2), torch.ones(1, 2))[0], 3.5)
    with pytest.raises(ValueError):
        policy_loss(logprobs, torch.zeros(1, 2), -torch.ones(1, 2), torch.ones(1, 2), dual_clip=0.5)


def test_masked_garbage_never_overflows():
    # position 1 is masked and holds a log-ratio of 2000: exp() of it must never be taken
    logprobs = _leaf([[math.log(1.1), 1000.0], [0.0, 0.0]])
    old = T([[0.0, -1000.0], [0.0, 0.0]])
    adv = T([[1.0, float("nan")], [0.0, 0.0]])
    mask = T([[1, 0], [0, 0]])
    loss, metrics = policy_loss(logprobs, old, adv, mask, agg="seq-mean-token-mean")
    close(loss, -1.1)  # only the first token: -1 * 1.1
    loss.backward()
    close(logprobs.grad, [[-1.1, 0.0], [0.0, 0.0]])
    close(metrics["ratio_max"], 1.1)


# --- KL, entropy, log-probs ----------------------------------------------------------------------------------------


def test_kl_estimators_on_known_numbers():
    # d = logprobs - ref = [0.5, -1, 0]
    logprobs, ref = T([0.0, -1.0, -0.3]), T([-0.5, 0.0, -0.3])
    close(kl_penalty(logprobs, ref, "k1"), [0.5, -1.0, 0.0])
    close(kl_penalty(logprobs, ref, "k2"), [0.125, 0.5, 0.0])  # d^2 / 2
    # k3 = e^-d - 1 + d: e^-0.5 - 0.5 = 0.1065307; e^1 - 2 = 0.7182818; 0
    close(kl_penalty(logprobs, ref, "k3"), [0.1065307, 0.7182818, 0.0])
    # d = -50: e^50 would be 5e21; -d is clamped to 20 and the result to 10
    close(kl_penalty(T([-50.0]), T([0.0]), "k3"), [10.0])
    with pytest.raises(ValueError):
        kl_penalty(logprobs, ref, "k4")


def test_entropy():
    close(entropy_from_logits(torch.zeros(2, 3, 7)), torch.full((2, 3), math.log(7)))
    close(entropy_from_logits(torch.full((1, 1, 5), 1e4)), [[math.log(5)]])  # huge logits, still uniform
    # p = [0.5, 0.25, 0.25]: H = 0.5 ln 2 + 2 * 0.25 ln 4 = 1.0397208
    close(entropy_from_logits(torch.log(T([[[0.5, 0.25, 0.25]]]))), [[1.0397208]])
    # -inf logits (filtered vocabulary) have p = 0: two live tokens -> ln 2, no NaN in value or gradient
    logits = _leaf([[[0.0, 0.0, float("-inf"), float("-inf")]]])
    entropy = entropy_from_logits(logits)
    close(entropy, [[math.log(2)]])
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_token_logprobs_divides_by_temperature_first():
    logits = T([[[2.0, 0.0, 0.0]]])
    # T = 1: 2 - ln(e^2 + 2) = 2 - 2.2395447 = -0.2395447
    close(token_logprobs(logits, T([[0]])), [[-0.2395447]])
    # T = 2: logits/T = [1, 0, 0]; ln(e + 2) = 1.5514448 -> target 0: -0.5514448, target 1: -1.5514448
    close(token_logprobs(logits, T([[0]]), temperature=2.0), [[-0.5514448]])
    close(token_logprobs(logits, T([[1]]), temperature=2.0), [[-1.5514448]])
    # same as log_softmax on a bigger random batch
    torch.manual_seed(0)
    logits, ids = torch.randn(2, 3, 11), torch.randint(0, 11, (2, 3))
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, ids[..., None]).squeeze(-1)
    close(token_logprobs(logits, ids, temperature=0.7), expected)


# --- value loss ----------------------------------------------------------------------------------------------------


def test_value_loss_clipping():
    # token 0: old 0, new 0.5, return 1: unclipped (0.5-1)^2 = 0.25; v_clip = 0 + clip(0.5, +-0.2) = 0.2,
    #          clipped (0.2-1)^2 = 0.64 -> max 0.64, the clipped one: gradient 0
    # token 1: old 0, new 0.5, return 0: unclipped 0.25; clipped (0.2-0)^2 = 0.04 -> max 0.25, gradient 2*0.5 = 1
    # loss = 0.5 * (0.64 + 0.25) / 2 = 0.2225; gradients 0.5 * [0, 1] / 2 = [0, 0.25]
    values = _leaf([[0.5, 0.5, 123.0]])
    old, returns, mask = T([[0.0, 0.0, 0.0]]), T([[1.0, 0.0, 0.0]]), T([[1, 1, 0]])
    loss, metrics = value_loss(values, old, returns, mask, clip=0.2)
    close(loss, 0.2225)
    loss.backward()
    close(values.grad, [[0.0, 0.25, 0.0]])
    close(metrics["value_clip_fraction"], 0.5)
    # no clipping: 0.5 * (0.25 + 0.25) / 2 = 0.125
    close(value_loss(values, old, returns, mask, clip=None)[0], 0.125)


# --- GSPO and CISPO ------------------------------------------------------------------------------------------------


def test_gspo_ratio_and_clip_are_per_sequence():
    # row 0: log-ratios [+ln 1.1, -ln 1.1] -> sequence ratio exp(mean) = 1, inside the range: loss -A * 1 = -1 per
    #   token; each token's gradient is s_i,t = 1 times -A, over the row's 2 tokens: -0.5 each (PPO would give
    #   -1.1 / 2 and -0.909 / 2), then / 2 rows: -0.25
    # row 1: log-ratios [0.5, 0.5] -> s = e^0.5 = 1.6487 > 1 + 0.2: clipped, loss -1.2 per token, gradient 0
    # seq-mean-token-mean: (-1 + -1.2) / 2 = -1.1
    logprobs = _leaf([[math.log(1.1), -math.log(1.1)], [0.5, 0.5]])
    loss, metrics = gspo_loss(
        logprobs, torch.zeros(2, 2), torch.ones(2, 2), torch.ones(2, 2), clip_low=0.2, clip_high=0.2
    )
    close(loss, -1.1)
    loss.backward()
    close(logprobs.grad, [[-0.25, -0.25], [0.0, 0.0]])
    close(metrics["clip_fraction"], 0.5)  # row 1's two tokens of four
    close(metrics["ratio_mean"], (1 + math.exp(0.5)) / 2)
    close(metrics["ratio_max"], math.exp(0.5))


def test_gspo_and_cispo_ignore_masked_garbage():
    logprobs = _leaf([[-1.0, float("-inf"), 1e4]])
    mask = T([[1.0, 0.0, 0.0]])
    for loss_fn in (gspo_loss, cispo_loss):
        logprobs.grad = None
        loss, metrics = loss_fn(logprobs, T([[-1.0, 50.0, -1e4]]), torch.ones(1, 3), mask)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logprobs.grad).all()
        assert all(torch.isfinite(torch.as_tensor(v)) for v in metrics.values())


def test_cispo_keeps_a_clipped_tokens_gradient_through_a_detached_weight():
    # ratios e^0.5 = 1.6487 and e^-0.5 = 0.6065 -> weights clip(., 0.8, 1.28) = [1.28, 0.8], detached; A = 2
    # per-token loss -w * A * logprob = [-1.28 * 2 * 0.5, -0.8 * 2 * -0.5] = [-1.28, 0.8]; token-mean -0.24
    # gradient -w * A / 2 = [-1.28, -0.8]; PPO's would be 0 for token 0 (clipped above with A > 0)
    logprobs = _leaf([[0.5, -0.5]])
    loss, metrics = cispo_loss(
        logprobs, torch.zeros(1, 2), torch.full((1, 2), 2.0), torch.ones(1, 2), clip_low=0.2, clip_high=0.28
    )
    close(loss, -0.24)
    loss.backward()
    close(logprobs.grad, [[-1.28, -0.8]])
    close(metrics["clip_fraction"], 1.0)
    ppo_logprobs = _leaf([[0.5, -0.5]])
    ppo, _ = policy_loss(ppo_logprobs, torch.zeros(1, 2), torch.full((1, 2), 2.0), torch.ones(1, 2), clip_high=0.28)
    ppo.backward()
    assert ppo_logprobs.grad[0, 0] == 0.0


@pytest.mark.parametrize(("kind", "expected"), [("ppo", policy_loss), ("gspo", gspo_loss), ("cispo", cispo_loss)])
def test_the_config_chooses_the_policy_loss(kind, expected):
    algorithm = AlgorithmConfig(policy_loss=kind, loss_agg="seq-mean-token-mean")
    logprobs, old = T([[0.3, -0.2, 0.1]]), torch.zeros(1, 3)
    advantages, mask = T([[1.0, 1.0, 1.0]]), torch.ones(1, 3)
    loss, losses, _ = actor_loss(logprobs, torch.zeros(1, 3), old, advantages, mask, algorithm)
    direct, _ = expected(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2, agg="seq-mean-token-mean")
    close(loss, direct)
    assert losses["pg_loss"] == pytest.approx(direct.item())


def test_dual_clip_is_refused_for_a_loss_without_that_branch():
    with pytest.raises(ConfigError, match="algorithm.dual_clip bounds PPO's loss"):
        load_config(None, ["algorithm.policy_loss=gspo", "algorithm.dual_clip=3"])


def test_each_role_gets_its_own_policy_loss_within_one_aggregate():
    # row 0, solver (ppo, clip 0.2): ratios [1.5, 1], A = 1 -> per token max(-r, -clip(r)) = [-1.2, -1]; token 0
    #   is clipped (no gradient), token 1's gradient -1 / 4 tokens
    # row 1, judge (gspo, clip 0.2): log-ratios [+ln 1.1, -ln 1.1] -> sequence ratio 1: [-1, -1], each token's
    #   gradient -1 / 4 (PPO would give -1.1 / 4 and -0.909 / 4)
    # token-mean over the 4 tokens: (-2.2 - 2) / 4 = -1.05; clip_fraction 1 / 4
    algorithm = AlgorithmConfig(clip_low=0.2, clip_high=0.2, roles={"judge": {"policy_loss": "gspo"}})
    logprobs = _leaf([[math.log(1.5), 0.0], [math.log(1.1), -math.log(1.1)]])
    mask, advantages = torch.ones(2, 2), torch.ones(2, 2)
    loss, losses, means = actor_loss(
        logprobs, torch.zeros(2, 2), torch.zeros(2, 2), advantages, mask, algorithm, row_roles=["solver", "judge"]
    )
    close(loss, -1.05)
    loss.backward()
    close(logprobs.grad, [[0.0, -0.25], [-0.25, -0.25]])
    assert losses["pg_loss"] == pytest.approx(-1.05) and means["clip_fraction"] == pytest.approx(0.25)
    # without roles both rows are ppo's: (-2.2 - 1.1 - 1 / 1.1) / 4
    plain, _, _ = actor_loss(logprobs, torch.zeros(2, 2), torch.zeros(2, 2), advantages, mask, algorithm)
    close(plain, (-2.2 - 1.1 - 1 / 1.1) / 4)


def test_a_roles_clip_range_applies_to_its_rows_only_per_sequence_too():
    # seq-mean-token-mean; both rows ratio 1.5 on one token, A = 1. solver clips at 1.2 -> -1.2; judge (clip_high
    # 0.6) keeps 1.5 -> -1.5; mean over rows -1.35
    algorithm = AlgorithmConfig(clip_high=0.2, loss_agg="seq-mean-token-mean", roles={"judge": {"clip_high": 0.6}})
    logprobs = T([[math.log(1.5), 0.0], [math.log(1.5), 0.0]])
    mask = T([[1, 0], [1, 0]])
    loss, _, means = actor_loss(
        logprobs, torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2, 2), mask, algorithm, row_roles=["solver", "judge"]
    )
    close(loss, -1.35)
    assert means["clip_fraction"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="row_roles names 1 rows, the micro-batch has 2"):
        actor_loss(
            logprobs, torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2, 2), mask, algorithm, row_roles=["judge"]
        )


def test_per_role_policy_losses_are_checked_where_they_cannot_apply():
    with pytest.raises(ConfigError, match=r"algorithm.roles.judge.policy_loss='gspo' has no such branch"):
        load_config(None, ["algorithm.dual_clip=3", "algorithm.roles.judge.policy_loss=gspo"])
    with pytest.raises(ConfigError, match="a policy loss per role.*torch backend only"):
        load_config(None, ["trainer.backend=verl", "algorithm.roles.judge.clip_high=0.3"])
    assert load_config(None, ["algorithm.roles.judge.policy_loss=cispo"]).algorithm.for_role("judge").policy_loss == (
        "cispo"
    )

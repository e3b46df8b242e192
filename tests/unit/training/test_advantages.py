"""Advantage estimators against numbers computed by hand (the arithmetic is in the comments)."""

import math

import pytest

torch = pytest.importorskip("torch")

from rllm.training.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_advantages,
    discounted_returns,
    gae_advantages,
    group_index_from_keys,
    grpo_advantages,
    masked_whiten,
    reinforce_advantages,
    reinforce_pp_advantages,
    remax_advantages,
    rloo_advantages,
    uniform_groups,
)

T = torch.tensor


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, T(expected, dtype=actual.dtype), atol=atol, rtol=0)


def test_group_index_from_keys_is_first_seen_order():
    assert group_index_from_keys(["b:agent", "a:agent", "b:agent", "b:judge"]).tolist() == [0, 1, 0, 2]
    assert group_index_from_keys([]).tolist() == []


def test_grpo_one_group_unbiased_std():
    # mean 0.5; deviations +-0.5; unbiased var = (4 * 0.25) / 3 = 1/3; std 0.57735 -> +-0.5 / 0.57735 = +-0.86603
    adv = grpo_advantages(T([1.0, 0.0, 0.0, 1.0]), T([0, 0, 0, 0]))
    close(adv, [0.86603, -0.86603, -0.86603, 0.86603])


def test_grpo_two_interleaved_groups():
    # group 0 = entries 0,2,4 = [1, 0, 2]: mean 1, var (0+1+1)/2 = 1, std 1 -> [0, -1, 1]
    # group 1 = entries 1,3,5 = [2, 4, 6]: mean 4, var (4+0+4)/2 = 4, std 2 -> [-1, 0, 1]
    adv = grpo_advantages(T([1.0, 2.0, 0.0, 4.0, 2.0, 6.0]), T([0, 1, 0, 1, 0, 1]))
    close(adv, [0.0, -1.0, -1.0, 0.0, 1.0, 1.0])


def test_grpo_invalid_entries_are_out_of_the_stats_and_get_zero():
    # valid rewards [1, 0, 0.5]: mean 0.5, var (0.25+0.25+0)/2 = 0.25, std 0.5 -> [1, -1, 0]; the 100 is ignored
    adv = grpo_advantages(T([1.0, 0.0, 100.0, 0.5]), T([7, 7, 7, 7]), T([True, True, False, True]))
    close(adv, [1.0, -1.0, 0.0, 0.0])


def test_grpo_singleton_groups_get_zero():
    # group 0 = [3] alone -> 0; group 1 = [1, 2]: mean 1.5, var 0.5/1, std 0.70711 -> -+0.5/0.70711 = -+0.70711
    close(grpo_advantages(T([3.0, 1.0, 2.0]), T([0, 1, 1])), [0.0, -0.70711, 0.70711])
    # a group left with one valid member is a singleton too (verl would hand it its raw reward)
    close(grpo_advantages(T([3.0, 1.0]), T([0, 0]), T([True, False])), [0.0, 0.0])


def test_grpo_uniform_group_is_zero_not_nan():
    close(grpo_advantages(T([1.0, 1.0, 1.0]), T([0, 0, 0])), [0.0, 0.0, 0.0])


def test_dr_grpo_does_not_divide_by_std():
    # mean 0.5 -> r - 0.5
    close(compute_advantages("dr_grpo", T([1.0, 0.0, 0.0, 1.0]), T([0, 0, 0, 0])), [0.5, -0.5, -0.5, 0.5])
    close(grpo_advantages(T([1.0, 0.0, 0.0, 1.0]), T([0, 0, 0, 0]), norm_by_std=False), [0.5, -0.5, -0.5, 0.5])


def test_rloo_leave_one_out():
    # A_0 = 1 - (0+0+1)/3 = 2/3; A_1 = 0 - (1+0+1)/3 = -2/3; symmetric for the others
    close(rloo_advantages(T([1.0, 0.0, 0.0, 1.0]), T([0, 0, 0, 0])), [2 / 3, -2 / 3, -2 / 3, 2 / 3])


def test_rloo_invalid_and_singleton():
    # group 0 valid = [1, 0, 2] (the 5 is invalid): A_0 = 1-(0+2)/2 = 0; A_1 = 0-(1+2)/2 = -1.5; A_3 = 2-(1+0)/2 = 1.5
    # group 1 = [4] alone -> 0
    adv = rloo_advantages(T([1.0, 0.0, 5.0, 2.0, 4.0]), T([0, 0, 0, 0, 1]), T([True, True, False, True, True]))
    close(adv, [0.0, -1.5, 0.0, 1.5, 0.0])


def test_remax_subtracts_the_group_greedy_reward():
    # group 0 greedy 0.5: [1-0.5, 0-0.5]; group 1 greedy 1.0: [0.5-1, 1-1]
    adv = remax_advantages(T([1.0, 0.0, 0.5, 1.0]), T([0, 0, 1, 1]), T([0.5, 1.0]))
    close(adv, [0.5, -0.5, -0.5, 0.0])
    # ids index the greedy tensor as given (not compacted); invalid entries get 0
    adv = compute_advantages(
        "remax", T([1.0, 1.0, 1.0]), T([2, 2, 0]), T([True, False, True]), greedy_rewards_per_group=T([0.4, 9.0, 0.1])
    )
    close(adv, [0.9, 0.0, 0.6])


def test_reinforce_pp_group_baseline_then_batch_whitening():
    # group means: g0 [1, 0] -> 0.5, g1 [1, 1] -> 1; centred [0.5, -0.5, 0, 0]; batch mean 0
    # unbiased var = (0.25+0.25+0+0)/3 = 1/6, std 0.40825 -> [1.22474, -1.22474, 0, 0]; the invalid 9 is excluded
    adv = reinforce_pp_advantages(T([1.0, 0.0, 1.0, 1.0, 9.0]), T([0, 0, 1, 1, 1]), T([True, True, True, True, False]))
    close(adv, [1.22474, -1.22474, 0.0, 0.0, 0.0])


def test_reinforce_pp_without_baseline_whitens_the_batch():
    # mean 3; deviations [-2, -1, 0, 3]; var (4+1+0+9)/3 = 14/3, std 2.16025 -> [-0.92582, -0.46291, 0, 1.38873]
    adv = reinforce_pp_advantages(T([1.0, 2.0, 3.0, 6.0]), baseline=False)
    close(adv, [-0.92582, -0.46291, 0.0, 1.38873])
    with pytest.raises(ValueError):
        reinforce_pp_advantages(T([1.0, 2.0]))


def test_reinforce_is_the_raw_reward_and_zero_when_invalid():
    # no baseline: A_i = r_i, whatever the group (a lone member of group 9 keeps its 0.5); the invalid 3.0 gets 0
    rewards, groups = T([1.0, -1.0, 3.0, 0.5]), T([0, 0, 0, 9])
    close(reinforce_advantages(rewards, groups, T([True, True, False, True])), [1.0, -1.0, 0.0, 0.5])
    close(reinforce_advantages(T([2, 0])), [2.0, 0.0])  # ints become floats; no groups needed
    close(compute_advantages("reinforce", T([1.0, 0.0]), T([0, 0])), [1.0, 0.0])


def test_masked_whiten_ignores_masked_entries():
    # [1, 3] (the 50 masked): mean 2, unbiased var (1+1)/1 = 2, std 1.41421 -> [-0.70711, 0, 0.70711]
    close(masked_whiten(T([1.0, 50.0, 3.0]), T([True, False, True])), [-0.70711, 0.0, 0.70711])


def test_gae_jumps_over_observation_tokens():
    # Row 0: [A0 A0 | obs obs | A1], reward 1 on the last action token; the observation tokens hold garbage values.
    # gamma 0.9, lam 0.5 (gamma*lam = 0.45)
    # t=4: delta = 1 + 0.9*0 - 0.8 = 0.2;            A = 0.2;                    ret = 0.2 + 0.8 = 1.0
    # t=3,2: observation, skipped: next value stays 0.8 (V at t=4), next advantage stays 0.2
    # t=1: delta = 0 + 0.9*0.8 - 0.6 = 0.12;         A = 0.12 + 0.45*0.2 = 0.21;  ret = 0.81
    # t=0: delta = 0 + 0.9*0.6 - 0.5 = 0.04;         A = 0.04 + 0.45*0.21 = 0.1345; ret = 0.6345
    # Row 1: three action tokens then padding (NaN values must not leak), V = 0, reward 1 at t=2:
    # t=2: A = 1; t=1: delta 0, A = 0.45*1 = 0.45; t=0: A = 0.45*0.45 = 0.2025; returns = advantages (V = 0)
    rewards = T([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0, 0.0]])
    values = T([[0.5, 0.6, 9.0, 9.0, 0.8], [0.0, 0.0, 0.0, float("nan"), float("nan")]])
    mask = T([[1, 1, 0, 0, 1], [1, 1, 1, 0, 0]])
    adv, ret = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.5)
    close(adv, [[0.1345, 0.21, 0.0, 0.0, 0.2], [0.2025, 0.45, 1.0, 0.0, 0.0]])
    close(ret, [[0.6345, 0.81, 0.0, 0.0, 1.0], [0.2025, 0.45, 1.0, 0.0, 0.0]])


def test_gae_with_gamma_lam_one_is_return_minus_value():
    # lam = gamma = 1: A_t = (sum of future rewards) - V_t = 1 - V_t on every action token
    adv, ret = gae_advantages(T([[0.0, 0.0, 0.0, 1.0]]), T([[0.2, 7.0, 0.4, 0.6]]), T([[1, 0, 1, 1]]))
    close(adv, [[0.8, 0.0, 0.6, 0.4]])
    close(ret, [[1.0, 0.0, 1.0, 1.0]])


def test_gae_refuses_reward_on_a_masked_token():
    with pytest.raises(ValueError):
        gae_advantages(T([[0.0, 1.0]]), T([[0.0, 0.0]]), T([[1, 0]]))


def test_discounted_returns():
    # G2 = 2; G1 = 0 + 0.5*2 = 1; G0 = 1 + 0.5*1 = 1.5
    assert discounted_returns([1.0, 0.0, 2.0], 0.5) == [1.5, 1.0, 2.0]
    assert discounted_returns([], 0.9) == []


def test_uniform_groups():
    # g0 [1, 1] equal; g1 [0, 1] not; g2 valid [5] (7 is invalid) equal; g3 [3] alone; g4 has no valid member
    rewards = T([1.0, 1.0, 0.0, 1.0, 5.0, 7.0, 3.0, 2.0])
    groups = T([0, 0, 1, 1, 2, 2, 3, 4])
    valid = T([True, True, True, True, True, False, True, False])
    assert uniform_groups(rewards, groups, valid).tolist() == [True, True, False, False, True, True, True, True]


def test_registry_and_dispatch():
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "dr_grpo", "rloo", "remax", "reinforce_pp", "reinforce", "gae"}
    # mean 0.5, unbiased std sqrt(0.5) = 0.70711 -> +-0.5 / 0.70711 = +-0.70711
    close(compute_advantages("grpo", T([1.0, 0.0]), T([0, 0])), [0.70711, -0.70711])
    close(compute_advantages("rloo", T([1.0, 0.0]), T([0, 0])), [1.0, -1.0])
    for bad in ("gae", "ppo"):
        with pytest.raises(ValueError):
            compute_advantages(bad, T([1.0]), T([0]))
    with pytest.raises(ValueError):
        compute_advantages("remax", T([1.0]), T([0]))


@pytest.mark.parametrize("huge", [1e39, 1e300, 1.7e308])
def test_finite_rewards_of_any_size_give_finite_advantages(huge):
    """float32 estimators overflowed on rewards beyond ~1e19 (NaN advantages for the whole group); rewards are now
    scaled by a power of two first: GRPO's normalised advantages are those of the same rewards at unit scale, and
    RLOO's stay in reward units (Python floats, finite)."""
    from rllm.config import AlgorithmConfig
    from rllm.training.advantages import _role_step_advantages

    steps, keys, valid = [[0.0]] * 4, ["g"] * 4, [True] * 4
    grpo = AlgorithmConfig(advantage="grpo").for_role("agent")
    got = [a for (a,) in _role_step_advantages(grpo, steps, keys, [huge, 0.0, huge, 0.0], valid, None)]
    unit = [a for (a,) in _role_step_advantages(grpo, steps, keys, [1.0, 0.0, 1.0, 0.0], valid, None)]
    assert got == pytest.approx(unit, rel=1e-5)  # (up to the eps added to the std, which does not scale)
    rloo = AlgorithmConfig(advantage="rloo").for_role("agent")
    got = [a for (a,) in _role_step_advantages(rloo, steps, keys, [huge, 0.0, huge, 0.0], valid, None)]
    assert all(math.isfinite(a) for a in got)
    assert got == pytest.approx([huge / 3 * 2, -huge / 3 * 2] * 2, rel=1e-6)


# A uniform group of non-binary rewards (partial credit) carries no signal: every member's advantage is exactly 0.
# In float32 GRPO gave 8 x 0.7 +0.056 each and 7 x 0.1 -0.0074 (mean off by an ulp, std an ulp, / (std + 1e-6)).
UNIFORM = [(0.7, 8), (0.1, 7), (1.0 / 3.0, 5), (123.456, 4)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo", "reinforce_pp", "remax"])
def test_uniform_groups_of_non_binary_rewards_get_exactly_zero(estimator, dtype):
    values = [value for value, n in UNIFORM for _ in range(n)] + [1.0, 0.0]  # and one group with a signal
    groups = T([g for g, (_, n) in enumerate(UNIFORM) for _ in range(n)] + [len(UNIFORM)] * 2)
    rewards = T(values, dtype=dtype)
    options = {}
    if estimator == "remax":  # the greedy rollout of each group scored what its samples did
        options["greedy_rewards_per_group"] = T([value for value, _ in UNIFORM] + [0.5], dtype=dtype)
    advantages = ADVANTAGE_ESTIMATORS[estimator](rewards, groups, **options)
    assert advantages.dtype == dtype
    uniform = advantages[: len(values) - 2]
    assert uniform.tolist() == [0.0] * len(uniform)  # exactly, not approximately
    assert advantages[-2] > 0 > advantages[-1]  # the varied group still learns

"""TorchBackend on a tiny random-init Llama with the real SmolLM2 tokenizer: on-policy exactness end to end (sample
with a LocalModel sharing the weights, recompute), the direction of updates, LoRA isolation, exact gradient
accumulation, the gathered output layer, checkpoints, merged weights for another client, and the critic."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

from rllm.config import AlgorithmConfig, LoraConfig, ModelConfig, OptimConfig
from rllm.inference import InferenceOptions
from rllm.training.backends.torch import TorchBackend
from rllm.training.backends.torch_model import forward_targets, linear_module_names, lr_factor
from rllm.training.batch import TrainingRow, collate
from tests.support.backends import grads, make_backend, sample_rows
from tests.support.models import sharp_tiny_model


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


@pytest.fixture(scope="module")
def base_model(tokenizer):
    return sharp_tiny_model(tokenizer)


def loss_token_logprobs(backend, rows, **kwargs):
    lps = backend.compute_logprobs(rows, temperature=1.0, **kwargs)
    return [
        [lp for lp, m in zip(row_lp, row.loss_mask, strict=True) if m] for row_lp, row in zip(lps, rows, strict=True)
    ]


def synthetic_rows(n=6, seed=0, backend=None):
    """Rows of different lengths and loss spans (multi-turn-like gaps), with mixed advantages. With `backend`,
    old logprobs are its own plus noise (some ratios clipped, most not) so the policy loss has gradients."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        prompt, length = 3 + i, 10 + 3 * i
        ids = torch.randint(10, 1000, (length,), generator=g).tolist()
        mask = [0] * prompt + [1] * (length - prompt)
        if i % 2:
            mask[prompt + 2 : prompt + 4] = [0, 0]  # an observation inside the row
        adv = 1.0 if i % 3 else -0.5
        rows.append(
            TrainingRow(
                input_ids=ids,
                prompt_length=prompt,
                loss_mask=mask,
                old_logprobs=[-3.0 * m for m in mask],
                advantages=[adv * m for m in mask],
                group_key=f"t{i}:a",
                episode_id=f"t{i}:0",
                trajectory_name="a",
            )
        )
    if backend is not None:
        for row, lps in zip(rows, backend.compute_logprobs(rows, temperature=1.0), strict=True):
            noise = (torch.rand(len(row), generator=g) - 0.5).tolist()
            row.old_logprobs = [(lp + 0.6 * e) * m for lp, e, m in zip(lps, noise, row.loss_mask, strict=True)]
    return rows


def test_on_policy_logprobs_and_first_update_ratio_is_one(tokenizer, base_model):
    backend = make_backend(tokenizer, base_model)
    rows = sample_rows(backend, tokenizer, [1.0, -1.0, 0.5, -0.5])
    sampled = [[lp for lp, m in zip(r.old_logprobs, r.loss_mask, strict=True) if m] for r in rows]
    recomputed = loss_token_logprobs(backend, rows)
    assert sum(map(len, sampled)) > 8
    for a, b in zip(sampled, recomputed, strict=True):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)
    metrics = backend.update(rows, temperature=1.0)
    assert metrics["approx_kl"] < 1e-8
    assert metrics["clip_fraction"] == 0.0
    assert metrics["train_tokens"] == sum(len(r) for r in rows)
    assert {"loss", "pg_loss", "grad_norm", "lr", "train_time_s", "train_tokens_per_s"} <= set(metrics)


def test_temperature_matches_sampling(tokenizer, base_model):
    backend = make_backend(tokenizer, base_model)
    rows = sample_rows(backend, tokenizer, [0.0] * 4, temperature=0.7)
    lps = backend.compute_logprobs(rows, temperature=0.7)
    for row, lp in zip(rows, lps, strict=True):
        got = torch.tensor([x for x, m in zip(lp, row.loss_mask, strict=True) if m])
        want = torch.tensor([x for x, m in zip(row.old_logprobs, row.loss_mask, strict=True) if m])
        assert torch.allclose(got, want, atol=1e-4, rtol=0)


def test_update_direction_follows_advantage_sign(tokenizer, base_model):
    backend = make_backend(tokenizer, base_model, lr=5e-3)
    advantages = [1.0, -1.0, 1.0, -1.0]
    rows = sample_rows(backend, tokenizer, advantages)
    before = loss_token_logprobs(backend, rows)
    backend.update(rows, temperature=1.0)
    after = loss_token_logprobs(backend, rows)
    for adv, b, a in zip(advantages, before, after, strict=True):
        change = sum(a) - sum(b)
        assert change > 0 if adv > 0 else change < 0


def test_lora_trains_only_adapters_and_reference_is_the_base(tokenizer, base_model):
    backend = make_backend(tokenizer, base_model, kl_coef=0.1, entropy_coef=0.01)
    rows = sample_rows(backend, tokenizer, [1.0, -1.0, 1.0, -1.0])
    frozen = {n: p.detach().clone() for n, p in backend.model.named_parameters() if not p.requires_grad}
    adapters = {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)
    before = loss_token_logprobs(backend, rows)
    metrics = backend.update(rows, temperature=1.0)
    assert {"kl", "entropy"} <= set(metrics) and metrics["entropy"] > 0
    for n, p in backend.model.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), n
    assert any(not torch.equal(p, adapters[n]) for n, p in backend.model.named_parameters() if n in adapters)
    assert loss_token_logprobs(backend, rows) != before
    reference = loss_token_logprobs(backend, rows, reference=True)
    for a, b in zip(before, reference, strict=True):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5, rtol=0)


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step()` has been overridden")
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_gradient_accumulation_is_exact(tokenizer, base_model, agg):
    results = []
    for micro in (1, 4):
        backend = make_backend(tokenizer, base_model, micro=micro, loss_agg=agg, kl_coef=0.05, entropy_coef=0.01)
        rows = synthetic_rows(backend=backend)
        backend.optimizer.step = lambda: None  # keep the gradients of the one step for comparison
        backend.update(rows, temperature=1.0)
        results.append(grads(backend))
    assert sum(g.norm() for g in results[0].values()) > 1e-3
    for other in results[1:]:
        assert other.keys() == results[0].keys()
        for name, grad in results[0].items():
            assert torch.allclose(grad, other[name], atol=1e-5, rtol=1e-4), name


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step()` has been overridden")
def test_gradient_checkpointing_gives_the_same_gradients(tokenizer, base_model):
    results = []
    for checkpointing in (False, True):
        backend = make_backend(tokenizer, base_model, checkpointing=checkpointing)
        backend.optimizer.step = lambda: None
        backend.update(synthetic_rows(backend=backend), temperature=1.0)
        results.append(grads(backend))
    assert results[0].keys() == results[1].keys() and results[0]
    for name, grad in results[0].items():
        assert torch.allclose(grad, results[1][name], atol=1e-6, rtol=1e-5), name


def test_gathered_head_equals_full_logits(tokenizer, base_model):
    backend = make_backend(tokenizer, base_model)
    batch = collate(synthetic_rows(), pad_id=tokenizer.pad_token_id)
    mask = batch["target_mask"] > 0
    for temperature in (1.0, 0.6):
        fast = forward_targets(backend.model, batch, mask, temperature=temperature, entropy=True, hidden=True)
        full = forward_targets(
            backend.model, batch, mask, temperature=temperature, entropy=True, hidden=True, gather=False
        )
        assert torch.allclose(fast.logprobs, full.logprobs, atol=1e-5, rtol=0)
        assert torch.allclose(fast.entropy, full.entropy, atol=1e-5, rtol=0)
        assert torch.allclose(fast.hidden, full.hidden, atol=1e-5, rtol=0)


def test_state_dict_round_trip_is_bitwise(tokenizer, base_model):
    kwargs = {"micro": 2, "ppo_epochs": 2, "mini_batches": 2}
    first = make_backend(tokenizer, base_model, **kwargs)
    rows = synthetic_rows(backend=first)
    first.update(rows, temperature=1.0)
    state = first.state_dict()
    first.update(rows, temperature=1.0)
    resumed = make_backend(tokenizer, base_model, **kwargs)
    resumed.load_state_dict(state)
    resumed.update(rows, temperature=1.0)
    for (name, a), (_, b) in zip(first.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    assert torch.equal(first.generator.get_state(), resumed.generator.get_state())
    assert first.scheduler.get_last_lr() == resumed.scheduler.get_last_lr()


def test_push_merged_weights_reproduce_the_lora_model(tokenizer, base_model):
    """W + scale * B @ A pushed to a plain copy of the base model gives the LoRA model's logits: to 1e-9 when both
    sides compute in float64 (the formula is exact), and in float32 within the rounding of the merged weights, which
    this deliberately sharp random model (logits up to ~25) amplifies to ~2e-4."""
    from rllm.inference.model import LocalModel

    backend = make_backend(tokenizer, base_model)
    backend.update(synthetic_rows(backend=backend), temperature=1.0)
    ids = torch.tensor([synthetic_rows()[3].input_ids])
    for dtype, tolerance in ((torch.float64, 1e-9), (torch.float32, 1e-3)):
        backend.model.to(dtype)
        plain = LocalModel(copy.deepcopy(base_model).to(dtype), tokenizer)
        try:
            version = backend.push_weights(plain)
            assert version == 1 and plain.weight_version == 1
            assert set(backend.rollout_state_dict()) <= set(plain.model.state_dict())
            with torch.no_grad():
                want = backend.model(input_ids=ids).logits
                got = plain.model(input_ids=ids).logits
                unmerged = base_model.to(dtype)(input_ids=ids).logits
        finally:
            plain.close()
            base_model.float()
        assert (want - unmerged).abs().max() > 1.0  # the update did change the LoRA model
        assert torch.allclose(want, got, atol=tolerance, rtol=0)


def test_push_to_shared_rollout_model_bumps_version_only(tokenizer, base_model):
    backend = make_backend(tokenizer, base_model)
    local = backend.make_rollout_model()
    try:
        assert local.model is backend.model
        assert backend.push_weights(local) == 1 and local.weight_version == 1
        with pytest.raises(ValueError, match="shares the training model"):
            backend.make_rollout_model(InferenceOptions(dtype="bfloat16"))
        backend.make_rollout_model(InferenceOptions(dtype="float32", device="cpu")).close()
    finally:
        local.close()


def test_value_head_learns_returns(tokenizer, base_model):
    backend = make_backend(tokenizer, base_model, advantage="gae", lr=2e-2)
    rows = synthetic_rows()
    with pytest.raises(ValueError, match="returns"):
        backend.update(rows, temperature=1.0)  # a critic needs value targets on the rows
    losses = []
    for _ in range(5):
        values = backend.compute_values(rows)
        for i, row in enumerate(rows):
            row.returns = [(0.5 + 0.1 * i) * m for m in row.loss_mask]
            row.old_values = values[i]
        losses.append(backend.update(rows, temperature=1.0)["value_loss"])
    assert losses[-1] < losses[0]
    assert [len(v) for v in values] == [len(r) for r in rows]
    assert all(
        v == 0.0 for row, vs in zip(rows, values, strict=True) for v, m in zip(vs, row.loss_mask, strict=True) if not m
    )
    assert backend.state_dict()["value_head"] is not None  # the critic is part of every checkpoint


def test_full_fine_tuning_and_kl_reference(tokenizer, base_model):
    backend = make_backend(tokenizer, base_model, lora=False, lr=1e-3, kl_coef=0.1)
    rows = synthetic_rows(backend=backend)
    before = loss_token_logprobs(backend, rows)
    metrics = backend.update(rows, temperature=1.0)
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-6)  # first step: policy == reference
    assert loss_token_logprobs(backend, rows) != before
    assert loss_token_logprobs(backend, rows, reference=True) == before
    assert backend.update(rows, temperature=1.0)["kl"] > 0


def test_lora_targets_missing_from_the_model_are_named(tokenizer, base_model):
    model_cfg = ModelConfig(name="unused", lora=LoraConfig(target_modules=["c_attn"]))
    with pytest.raises(ValueError, match="q_proj"):
        TorchBackend(
            model_cfg,
            AlgorithmConfig(),
            OptimConfig(),
            total_steps=1,
            model=copy.deepcopy(base_model),
            tokenizer=tokenizer,
        )
    assert "lm_head" in linear_module_names(base_model)


def test_lr_schedule_counts_optimizer_steps():
    factors = [lr_factor(s, schedule="linear", warmup=2, total=6) for s in range(6)]
    assert factors[:2] == [0.5, 1.0] and factors[2] == 1.0 and factors[-1] > 0
    assert all(a > b for a, b in itertools.pairwise(factors[2:]))
    assert lr_factor(5, schedule="cosine", warmup=0, total=10) == pytest.approx(0.5)


def test_a_gpu_device_without_a_gpu_fails_naming_the_fix(smollm2_tokenizer):
    from rllm.config import ConfigError, load_config

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    config = load_config(None, ["model.device=cuda"])
    with pytest.raises(RuntimeError, match="model.device=cpu"):
        TorchBackend(
            config.model,
            config.algorithm,
            config.optim,
            total_steps=1,
            device=config.model.device,
            model=sharp_tiny_model(smollm2_tokenizer),
            tokenizer=smollm2_tokenizer,
        )
    with pytest.raises(ConfigError, match="model.device"):
        load_config(None, ["model.device=gpu0"])


@pytest.mark.parametrize("lora", [True, False])
def test_packed_linears_train_like_torch_and_are_shared_with_rollouts(
    tokenizer, base_model, lora, tuned_runtime, monkeypatch
):
    """On a CPU in fp32 the backend runs its linears through oneDNN with packed weights (LoRA's frozen base layers
    in the backward too) and lends them to its rollout model; the gradients are torch's up to float rounding."""
    from rllm import runtime
    from rllm.inference import packed_linears
    from rllm.inference.kernels import PACKED, KernelChoice

    if not packed_linears.packed_linears_available():
        pytest.skip("this torch build cannot pack with oneDNN")
    # every shape packed, whatever this machine would choose (the choice itself: tests/unit/inference/test_kernels.py)
    monkeypatch.setattr(packed_linears, "KernelChoice", lambda **_: KernelChoice.fixed(PACKED))
    packed = make_backend(tokenizer, base_model, lora=lora)
    local = packed.make_rollout_model(InferenceOptions(max_batch_size=2))
    assert packed.packed_linears is not None and local._linears is packed.packed_linears
    local.close()
    with runtime.enabled(runtime.RuntimeOptions(packed_linears=False)):
        plain = make_backend(tokenizer, base_model, lora=lora)
    assert plain.packed_linears is None
    results = []
    for backend in (packed, plain):
        backend.optimizer.step = lambda: None
        backend.update(synthetic_rows(backend=packed), temperature=1.0)
        results.append(grads(backend))
    assert packed.packed_linears.calls > 0
    assert results[0].keys() == results[1].keys() and results[0]
    for name, grad in results[0].items():
        assert torch.allclose(grad, results[1][name], atol=1e-5, rtol=1e-4), name

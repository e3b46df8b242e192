"""The shared-prefix training forward (`rllm.training.backends.shared_prefix`): GRPO-like rows that share prompts
give the plain forward's log-probs, entropy, hidden states, loss and gradients, from fewer tokens."""

from __future__ import annotations

import pytest
import torch

from rllm.training.backends.shared_prefix import plan_shared_prefixes
from rllm.training.backends.torch_model import forward_targets
from rllm.training.batch import TrainingRow, collate
from tests.support.backends import grads, make_backend


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


@pytest.fixture(scope="module")
def base_model(tokenizer):
    from tests.support.models import sharp_tiny_model

    return sharp_tiny_model(tokenizer, 0)


def group_rows(seed=0, backend=None):
    """3 tasks x 3 samples (prompts of different lengths, completions of different lengths, one with an observation
    inside), plus a row with a prompt of its own and a row with no loss token at all."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(10, 1000, (n,), generator=g).tolist()  # noqa: E731
    rows = []
    for task, prompt_length in enumerate((7, 12, 5)):
        prompt = rand(prompt_length)
        for sample in range(3):
            completion = rand(3 + 2 * sample + task)
            mask = [0] * prompt_length + [1] * len(completion)
            if sample == 2:
                mask[prompt_length + 1 : prompt_length + 3] = [0, 0]
            rows.append(_row(prompt + completion, prompt_length, mask, 1.0 if sample else -1.0, f"t{task}:{sample}"))
    rows.append(_row(rand(9), 4, [0] * 4 + [1] * 5, 0.5, "alone:0"))
    rows.append(_row(rand(6), 6, [0] * 6, 0.0, "masked:0"))
    if backend is not None:  # old log-probs near the current ones, so the policy loss has gradients
        for row, lps in zip(rows, backend.compute_logprobs(rows, temperature=1.0), strict=True):
            noise = (torch.rand(len(row), generator=g) - 0.5).tolist()
            row.old_logprobs = [(lp + 0.6 * e) * m for lp, e, m in zip(lps, noise, row.loss_mask, strict=True)]
    return rows


def _row(ids, prompt_length, mask, advantage, episode):
    return TrainingRow(
        input_ids=ids,
        prompt_length=prompt_length,
        loss_mask=mask,
        old_logprobs=[-3.0 * m for m in mask],
        advantages=[advantage * m for m in mask],
        group_key=episode.split(":")[0],
        episode_id=episode,
        trajectory_name="a",
    )


def test_plan_groups_rows_by_the_tokens_before_their_first_loss_position(tokenizer):
    batch = collate(group_rows(), pad_id=tokenizer.pad_token_id)
    plan = plan_shared_prefixes(batch, batch["target_mask"] > 0)
    assert plan.rows.tolist() == list(range(10))  # the fully masked row takes no part
    assert plan.group.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert [len(p) for p in plan.prefix_ids] == [6, 11, 4, 3]  # the prompt minus the token whose logits score
    assert plan.starts.tolist() == [6, 6, 6, 11, 11, 11, 4, 4, 4, 3]
    alone = collate(group_rows()[-2:], pad_id=tokenizer.pad_token_id)
    assert plan_shared_prefixes(alone, alone["target_mask"] > 0) is None  # nothing shared: the plain forward


@pytest.mark.parametrize("lora", [True, False])
def test_shared_prefix_forward_equals_the_plain_one(tokenizer, base_model, lora):
    backend = make_backend(tokenizer, base_model, lora=lora)
    batch = collate(group_rows(), pad_id=tokenizer.pad_token_id)
    mask = batch["target_mask"] > 0
    for temperature in (1.0, 0.7):
        outs = [
            forward_targets(
                backend.model, batch, mask, temperature=temperature, entropy=True, hidden=True, share_prefix=share
            )
            for share in (True, False)
        ]
        assert outs[0].logprobs.shape == (int(mask.sum()),)
        # float rounding of other matmul shapes, relative to this sharp model's large logits (|log p| ~ 60)
        assert torch.allclose(outs[0].logprobs, outs[1].logprobs, atol=1e-5, rtol=1e-5)
        assert torch.allclose(outs[0].entropy, outs[1].entropy, atol=1e-5, rtol=1e-5)
        assert torch.allclose(outs[0].hidden, outs[1].hidden, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step()` has been overridden")
def test_update_with_shared_prefixes_gives_the_plain_loss_and_gradients(tokenizer, base_model, monkeypatch):
    import rllm.training.backends.torch_model as torch_model

    plain_forward = torch_model.forward_targets
    results = []
    for share in (True, False):
        monkeypatch.setattr(
            "rllm.training.backends.torch.forward_targets",
            lambda *a, _share=share, **k: plain_forward(*a, share_prefix=_share, **k),
        )
        backend = make_backend(tokenizer, base_model, micro=16, kl_coef=0.05, entropy_coef=0.01)
        rows = group_rows(backend=backend)
        backend.optimizer.step = lambda: None  # keep the gradients of the one step for comparison
        metrics = backend.update(rows, temperature=1.0)
        results.append((metrics, grads(backend)))
    (shared, shared_grads), (plain, plain_grads) = results
    assert abs(shared["loss"] - plain["loss"]) < 1e-6 and abs(shared["pg_loss"] - plain["pg_loss"]) < 1e-6
    assert sum(g.norm() for g in plain_grads.values()) > 1e-3 and shared_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.allclose(shared_grads[name], grad, atol=1e-5, rtol=1e-4), name

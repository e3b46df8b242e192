"""`output_logits`: the sliced output layer gives bitwise the logits of one matmul, with gradients to match."""

from __future__ import annotations

import torch
from torch import nn

from rllm.inference.lm_head import backbone_and_head, output_logits


def test_sliced_output_layer_is_bitwise_the_plain_one():
    torch.manual_seed(0)
    head = nn.Linear(64, 5000, bias=False)  # 5 slices, the last one short
    hidden = torch.randn(7, 64)
    assert torch.equal(output_logits(head, hidden), head(hidden))
    assert torch.equal(output_logits(head, hidden[:1]), head(hidden[:1]))


def test_sliced_output_layer_backpropagates_like_the_plain_one():
    torch.manual_seed(1)
    head = nn.Linear(32, 3000, bias=False)
    hidden = torch.randn(5, 32, requires_grad=True)
    target = torch.randn(5, 3000)
    (output_logits(head, hidden) * target).sum().backward()
    sliced = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    (head(hidden) * target).sum().backward()
    assert torch.allclose(sliced[0], hidden.grad, atol=1e-5) and torch.equal(sliced[1], head.weight.grad)


def test_other_heads_are_called_as_they_are():
    head = nn.Linear(16, 2048, bias=True)  # a bias: not sliced
    hidden = torch.randn(3, 16)
    assert torch.equal(output_logits(head, hidden), head(hidden))


def test_backbone_and_head_of_a_causal_lm(smollm2_tokenizer):
    from tests.support.models import sharp_tiny_model

    model = sharp_tiny_model(smollm2_tokenizer, 0)
    backbone, head = backbone_and_head(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        hidden = backbone(input_ids=ids).last_hidden_state[0]
        assert torch.equal(output_logits(head, hidden), model(input_ids=ids).logits[0])

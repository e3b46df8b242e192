"""The two halves of a transformers causal LM, and its output layer applied without waste.

`backbone_and_head` splits a CausalLM (peft-wrapped or not) into the transformer trunk and the output layer, so
callers can apply the output layer only where logits are needed: the trainer at the loss positions, `LocalModel`
at each row's last position. `output_logits` applies a plain `nn.Linear` output layer in slices of its rows on the
CPU: with a large vocabulary and few rows (a decode step) one `[rows, hidden] x [hidden, vocab]` GEMM streams the
whole weight per output tile and runs at a third of the machine's matmul rate, while 1024-row slices stay in cache
(measured with MKL on a 2-core AVX2 EPYC: SmolLM2's 49,152 x 576 head at 32 rows, 48 ms -> 31 ms). Every logit is
the same dot product over the hidden dimension either way, so the result is bitwise identical (a test checks it).
While a `rllm.inference.packed_linears.PackedLinears` is active and chose packing for the layer's shape on this
machine, the layer runs whole, through oneDNN with its weight packed once (faster still, where it was chosen).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rllm.inference.packed_linears import linear, runs_packed

__all__ = ["backbone_and_head", "output_logits"]

# Config attributes that mean "logits are not just head(hidden)": such models take the full-logits path.
_LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "output_multiplier_scale")
_HEAD_SLICE_ROWS = 1024


def backbone_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """The transformer trunk (returns `last_hidden_state`) and the output layer of a transformers CausalLM, with
    or without a peft wrapper; None when the model does not expose them or post-processes its logits."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    backbone = getattr(base, getattr(base, "base_model_prefix", "model"), None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    config = getattr(base, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if any(getattr(text_config, attr, None) not in (None, 1.0) for attr in _LOGIT_POSTPROCESSING):
        return None
    if not isinstance(backbone, nn.Module) or not isinstance(head, nn.Module) or backbone is base:
        return None
    return backbone, head


def output_logits(head: nn.Module, hidden: Tensor) -> Tensor:
    """`head(hidden)` for `hidden` of shape `[rows, hidden_size]`; a plain bias-free `nn.Linear` on the CPU is
    applied in slices of its output rows (see the module docstring). Returns the head's dtype."""
    weight = getattr(head, "weight", None)
    if type(head) is not nn.Linear or head.bias is not None or hidden.device.type != "cpu" or hidden.dim() != 2:
        return head(hidden)
    if runs_packed(hidden, weight):  # oneDNN with the weight packed once needs no slices
        return linear(hidden, weight)
    if weight.shape[0] <= _HEAD_SLICE_ROWS:
        return F.linear(hidden, weight)
    return torch.cat([F.linear(hidden, piece) for piece in weight.split(_HEAD_SLICE_ROWS)], dim=-1)

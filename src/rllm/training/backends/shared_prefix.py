"""The training forward with each shared prompt computed once: one prefill per distinct prompt, n continuations.

The k samples of one GRPO task are k rows `[prompt, completion_i]` with the same prompt, and the prompt is often
most of each row (a 60-token prompt and a 12-token answer). A plain forward computes the prompt's hidden states k
times, and its backward k times. Here, in a micro-batch, the rows are grouped by their prefix (every token before
the row's first loss position): each distinct prefix runs once through the trunk and keeps its keys and values,
and the suffixes (from the first loss position on) run as one batch that attends to their group's prefix K/V.
The gradient reaches the prefix through those K/V, summed over the group's rows: the same function, the same
gradient, computed from fewer tokens (prefix + sum of suffixes instead of k x row).

Causal attention makes this exact in value: K/V at position i depend only on tokens 0..i. The numbers move by
float rounding only (other matmul shapes: about 1e-6 relative in float32; a test compares log-probs, loss and
gradients with the plain forward). Both forwards get ready 4-D boolean masks, which transformers uses as they are,
and a small duck-typed cache (like `rllm.inference.cache.SlotKVCache`): the model's own layers, no patching.

Not used (the plain forward runs) when no two rows of the micro-batch share a prefix, when a prefix is empty, or
with gradient checkpointing (which turns the cache off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["PrefixPlan", "plan_shared_prefixes", "shared_prefix_states"]


@dataclass
class PrefixPlan:
    """Which rows run, which prefix each uses, and where each row's suffix starts."""

    rows: Tensor  # [R] indices of the micro-batch's rows that have loss positions
    group: Tensor  # [R] index into the distinct prefixes
    starts: Tensor  # [R] first loss position of each row (= its prefix length)
    prefix_ids: list[list[int]]  # the distinct prefixes


def plan_shared_prefixes(batch: dict[str, Tensor], positions: Tensor) -> PrefixPlan | None:
    """A plan when at least two rows share a non-empty prefix, else None (the plain forward is as good)."""
    has_loss = positions.any(dim=1)
    rows = has_loss.nonzero().squeeze(1)
    if rows.numel() < 2:
        return None
    starts = positions[rows].int().argmax(dim=1)  # the first True of each row
    # A VLM's rows: image tokens keyed by their image, so equal ids over other images are another prefix.
    ids = batch.get("image_key_ids", batch["input_ids"])[rows].tolist()
    index: dict[tuple[int, ...], int] = {}
    group = [index.setdefault(tuple(row[:start]), len(index)) for row, start in zip(ids, starts.tolist(), strict=True)]
    if len(index) == rows.numel() or min(starts.tolist()) == 0:
        return None
    return PrefixPlan(
        rows=rows,
        group=torch.tensor(group, device=rows.device),
        starts=starts,
        prefix_ids=[list(prefix) for prefix in index],
    )


def shared_prefix_states(
    backbone: nn.Module, batch: dict[str, Tensor], positions: Tensor, plan: PrefixPlan, embeds: Tensor | None = None
) -> Tensor:
    """The trunk's last hidden states at `positions` (`[N, H]`, row-major like `hidden[:, :-1][positions]`).
    `embeds` (`[B, L, H]`, a VLM's input embeddings with the image features in place) replace the ids: each prefix
    takes the embeddings of the first row of its group, each suffix its own row's."""
    device = batch["input_ids"].device
    cache = _PrefixCache()
    prefix_lengths = torch.tensor([len(p) for p in plan.prefix_ids], device=device)
    width = int(prefix_lengths.max())
    prefix_ids = torch.tensor([p + [0] * (width - len(p)) for p in plan.prefix_ids], device=device)
    steps = torch.arange(width, device=device)
    # Prefix rows are right-padded: a real query sees real keys up to itself; a padded one sees itself (no empty
    # softmax row, whose NaN would reach the gradient through 0 * NaN).
    causal = steps[None, :] <= steps[:, None]
    real = steps[None, :] < prefix_lengths[:, None]
    mask = causal[None] & (real[:, None, :] | ~real[:, :, None])
    if embeds is None:
        prefix_inputs = {"input_ids": prefix_ids}
    else:
        first = torch.zeros(len(plan.prefix_ids), dtype=torch.long, device=device)
        first.scatter_reduce_(0, plan.group, plan.rows, reduce="amin", include_self=False)
        prefix_inputs = {"inputs_embeds": embeds[first, :width]}  # past a prefix's end: padding, never attended to
    backbone(
        **prefix_inputs,
        position_ids=steps.expand(len(plan.prefix_ids), width),
        attention_mask=mask[:, None],
        past_key_values=cache,
        use_cache=True,
    )

    lengths = batch["attention_mask"][plan.rows].sum(dim=1)
    suffix_lengths = lengths - plan.starts
    span = int(suffix_lengths.max())
    offsets = torch.arange(span, device=device)
    take = (plan.starts[:, None] + offsets).clamp(max=batch["input_ids"].shape[1] - 1)
    if embeds is None:
        suffix_inputs = {"input_ids": batch["input_ids"][plan.rows].gather(1, take)}
    else:
        rows = embeds[plan.rows]
        suffix_inputs = {"inputs_embeds": rows.gather(1, take[..., None].expand(-1, -1, rows.shape[-1]))}
    # A suffix query sees its group's real prefix keys and its own earlier suffix keys.
    sees_prefix = steps[None, :] < prefix_lengths[plan.group][:, None]  # [R, width]
    causal = offsets[None, :] <= offsets[:, None]  # [span, span]
    mask = torch.cat([sees_prefix[:, None, :].expand(-1, span, -1), causal[None].expand(len(plan.rows), -1, -1)], 2)
    cache.start_suffix(plan.group, width)
    hidden = backbone(
        **suffix_inputs,
        position_ids=plan.starts[:, None] + offsets,
        attention_mask=mask[:, None],
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state

    # Suffix index i of row r is shifted position starts[r] + i; keep the requested ones, row-major.
    shifted = plan.starts[:, None] + offsets
    inside = shifted < positions.shape[1]
    selected = positions[plan.rows].gather(1, shifted.clamp(max=positions.shape[1] - 1)) & inside
    return hidden[selected]


class _PrefixCache:
    """Keys/values for the two forwards: the prefix forward stores them per layer; the suffix forward prepends
    each row's group prefix (gathered, so the gradient flows back to the prefix forward) to its own."""

    def __init__(self) -> None:
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        self._group: Tensor | None = None
        self._width = 0

    def start_suffix(self, group: Tensor, width: int) -> None:
        self._group, self._width = group, width

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        if self._group is None:
            self.keys.append(key)
            self.values.append(value)
            return key, value
        prefix_keys = self.keys[layer_idx].index_select(0, self._group)
        prefix_values = self.values[layer_idx].index_select(0, self._group)
        return torch.cat([prefix_keys, key], dim=2), torch.cat([prefix_values, value], dim=2)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._width if self._group is not None else 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.get_seq_length(layer_idx)

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.get_seq_length(layer_idx) + query_length, 0

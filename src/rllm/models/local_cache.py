"""The KV cache behind `LocalModel`'s continuous batching: one slot per running sequence, no padding to a common
prompt length, written in place.

transformers' own `DynamicCache` concatenates every layer's keys and values at every decode step (a copy of the
whole cache per token) and needs all rows of a batch to share one length (left padding). Here each layer holds
preallocated `[slots, kv_heads, capacity, head_dim]` buffers; sequence `i` lives in slot `i`, left-aligned, with
its own length. A decode step writes each row's new K/V at that row's own position (one indexed store per layer)
and attends over `[:n_active, :, :longest+1]` under a boolean mask, so the only "padding" left is the attention
over the gap between a row and the longest row, which is cheap next to the matmuls.

Design choices:
- The cache is duck-typed (not a `transformers.Cache` subclass): Llama-style models only call
  `update(key, value, layer_idx)` and, for prefill masks, `get_query_offset`/`get_mask_sizes`; we always pass
  explicit position ids and, for decode, a ready 4-D mask, which transformers uses as is.
- Active sequences always occupy slots `0..n-1`: a finished row is replaced by the last row (one copy per layer),
  so a step never gathers scattered rows.
- Capacity (positions) and slot rows grow on demand in chunks and the buffers are dropped when the model goes
  idle, so a trainer running in the same process gets the memory back between rollout phases.
- `PrefixStore` keeps compact copies of finished sequences' K/V (outside the slot buffers, so they survive the
  idle release) for the next turn of a multi-turn rollout, whose prompt extends the previous prompt + completion.
- Sliding-window attention is not modelled (every layer attends to the full prefix); models that rely on it
  (Mistral-style windows, Qwen2 with `use_sliding_window`) would differ from their reference beyond the window.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

__all__ = ["PrefixStore", "SlotKVCache", "common_prefix_length"]

_CAPACITY_CHUNK = 128


class SlotKVCache:
    """Per-layer K/V buffers with one slot per running sequence. See the module docstring."""

    def __init__(
        self,
        *,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: Any,
        max_slots: int,
        max_positions: int,
    ) -> None:
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        self.max_slots = max_slots
        self.max_positions = max_positions
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.lengths: list[int] = []  # tokens held, per active slot (slot i = row i)
        self._slots_allocated = 0
        self._capacity = 0
        # Set by `begin_prefill`/`begin_decode` before each forward; read by `update`.
        self._prefill_slot: int | None = None
        self._prefill_offset = 0  # positions already in the slot (a reused prefix) before this prefill
        self._decode_rows: torch.Tensor | None = None
        self._decode_positions: torch.Tensor | None = None
        self._decode_span = 0

    @property
    def num_active(self) -> int:
        return len(self.lengths)

    # ------------------------------------------------------------ allocation

    def _reallocate(self, slots: int, capacity: int) -> None:
        shape = (slots, self.num_kv_heads, capacity, self.head_dim)
        active, span = self.num_active, max(self.lengths, default=0)
        new_keys, new_values = [], []
        for layer in range(self.num_layers):
            # zeros, not empty: masked positions still enter q.k, and garbage could be inf/NaN (NaN * 0 = NaN)
            key = torch.zeros(shape, dtype=self.dtype, device=self.device)
            value = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if active and span:
                key[:active, :, :span] = self.keys[layer][:active, :, :span]
                value[:active, :, :span] = self.values[layer][:active, :, :span]
            new_keys.append(key)
            new_values.append(value)
        self.keys, self.values = new_keys, new_values
        self._slots_allocated, self._capacity = slots, capacity

    def reserve(self, slots: int, positions: int) -> None:
        """Make room for `slots` active rows of up to `positions` tokens each (grows, never shrinks)."""
        if positions > self.max_positions or slots > self.max_slots:
            raise ValueError(
                f"cache limit exceeded: {slots} slots x {positions} positions "
                f"(max {self.max_slots} x {self.max_positions})"
            )
        if slots <= self._slots_allocated and positions <= self._capacity:
            return
        new_slots = max(self._slots_allocated, min(self.max_slots, max(slots, 2 * self._slots_allocated, 4)))
        new_capacity = self._capacity
        if positions > self._capacity:
            new_capacity = min(
                self.max_positions, -(-(positions + _CAPACITY_CHUNK // 2) // _CAPACITY_CHUNK) * _CAPACITY_CHUNK
            )
        self._reallocate(new_slots, new_capacity)

    def release(self) -> None:
        """Drop the buffers (only when no sequence is active)."""
        assert not self.lengths, "release() with active sequences"
        self.keys, self.values = [], []
        self._slots_allocated = self._capacity = 0

    # ------------------------------------------------------------ slots

    def add_slot(self, positions: int) -> int:
        """A new empty row for up to `positions` tokens at the end of the active block; the caller fills it by a
        prefill or `copy_prefix`."""
        self.reserve(self.num_active + 1, max(positions, *self.lengths, 1))
        self.lengths.append(0)
        return self.num_active - 1

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        """Reuse `source`'s first `length` positions (a shared prompt) as `target`'s whole content."""
        for layer in range(self.num_layers):
            self.keys[layer][target, :, :length] = self.keys[layer][source, :, :length]
            self.values[layer][target, :, :length] = self.values[layer][source, :, :length]
        self.lengths[target] = length

    def read_prefix(self, slot: int, length: int) -> torch.Tensor:
        """A compact copy `[layers, 2, kv_heads, length, head_dim]` of `slot`'s first `length` positions."""
        return torch.stack(
            [
                torch.stack([k[slot, :, :length], v[slot, :, :length]])
                for k, v in zip(self.keys, self.values, strict=True)
            ]
        )

    def write_prefix(self, slot: int, kv: torch.Tensor) -> None:
        """Fill `slot` with a `read_prefix` copy; a prefill with `offset=kv.shape[3]` then appends the rest."""
        length = kv.shape[3]
        for layer in range(self.num_layers):
            self.keys[layer][slot, :, :length] = kv[layer, 0]
            self.values[layer][slot, :, :length] = kv[layer, 1]
        self.lengths[slot] = length

    def remove_slot(self, slot: int) -> int | None:
        """Free `slot` by moving the last row into it. Returns the index that moved (now `slot`), or None."""
        last = self.num_active - 1
        if slot != last:
            span = self.lengths[last]
            for layer in range(self.num_layers):
                self.keys[layer][slot, :, :span] = self.keys[layer][last, :, :span]
                self.values[layer][slot, :, :span] = self.values[layer][last, :, :span]
            self.lengths[slot] = span
        self.lengths.pop()
        return last if slot != last else None

    # ------------------------------------------------------------ forward passes

    def begin_prefill(self, slot: int, offset: int = 0) -> None:
        """The next forward is one prompt (batch 1) whose K/V go to `slot` after its first `offset` positions (a
        reused prefix, which the prompt's tokens then attend to)."""
        self._prefill_slot = slot
        self._prefill_offset = offset
        self._decode_rows = None

    def end_prefill(self, length: int) -> None:
        """`length`: the slot's whole content, prefix included."""
        self.lengths[self._prefill_slot] = length
        self._prefill_slot = None
        self._prefill_offset = 0

    def begin_decode(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next forward is one new token per active row. Returns (position_ids [n, 1], mask [n, 1, 1, span])."""
        n = self.num_active
        span = max(self.lengths) + 1
        self.reserve(n, span)
        positions = torch.tensor(self.lengths, dtype=torch.long, device=self.device)
        self._decode_rows = torch.arange(n, device=self.device)
        self._decode_positions = positions
        self._decode_span = span
        mask = torch.arange(span, device=self.device)[None, :] <= positions[:, None]
        return positions[:, None], mask[:, None, None, :]

    def end_decode(self) -> None:
        self.lengths = [length + 1 for length in self.lengths]
        self._decode_rows = self._decode_positions = None

    # ------------------------------------------------------------ what transformers calls

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        if self._prefill_slot is not None:
            slot, start = self._prefill_slot, self._prefill_offset
            end = start + key.shape[2]
            self.keys[layer_idx][slot, :, start:end] = key[0]
            self.values[layer_idx][slot, :, start:end] = value[0]
            if start == 0:
                return key, value  # a plain prefill attends to its own prompt only
            return self.keys[layer_idx][slot : slot + 1, :, :end], self.values[layer_idx][slot : slot + 1, :, :end]
        rows, positions, span = self._decode_rows, self._decode_positions, self._decode_span
        n = rows.shape[0]
        self.keys[layer_idx][rows, :, positions] = key[:, :, 0]
        self.values[layer_idx][rows, :, positions] = value[:, :, 0]
        return self.keys[layer_idx][:n, :, :span], self.values[layer_idx][:n, :, :span]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._prefill_offset if self._prefill_slot is not None else max(self.lengths, default=0)

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self._prefill_offset  # only asked during a prefill (decode passes a ready 4-D mask)

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._prefill_offset + query_length, 0  # prefill: keys are the reused prefix + the prompt's own


class PrefixStore:
    """LRU store of finished sequences' K/V, bounded by total tokens held (0 disables it).

    `lookup` returns the K/V of the longest common prefix of a prompt with any stored sequence (token lists
    compared, no hashing shortcuts), cut so at least one prompt token is left to prefill: the last prompt
    position's logits are needed to sample. K/V at position i depend only on tokens 0..i, so any common prefix is
    safe to reuse: the whole previous turn of a multi-turn rollout, or a system prompt shared with another task.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.tokens = 0
        self._entries: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()  # ids -> read_prefix copy

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0

    def lookup(self, prompt_ids: list[int], *, min_tokens: int = 1) -> torch.Tensor | None:
        """K/V (`[layers, 2, kv_heads, n, head_dim]`) of the prompt's first n tokens, the longest n shared with a
        stored sequence (at most all but the last prompt token), or None when no n reaches `min_tokens`."""
        best, length = None, 0
        limit = len(prompt_ids) - 1
        for ids in self._entries:
            shared = min(common_prefix_length(ids, prompt_ids), limit)
            if shared > length:
                best, length = ids, shared
        if best is None or length < max(min_tokens, 1):
            return None
        self._entries.move_to_end(best)
        return self._entries[best][:, :, :, :length]

    def put(self, ids: list[int], kv: torch.Tensor) -> None:
        key = tuple(ids)
        if not key or len(key) > self.max_tokens:
            return
        # Stored prefixes of the new sequence are subsumed by it (the previous turn of the same rollout).
        for old in [old for old in self._entries if len(old) <= len(key) and key[: len(old)] == old]:
            self._drop(old)
        while self._entries and self.tokens + len(key) > self.max_tokens:
            self._drop(next(iter(self._entries)))
        self._entries[key] = kv
        self.tokens += len(key)

    def _drop(self, key: tuple[int, ...]) -> None:
        del self._entries[key]
        self.tokens -= len(key)


def common_prefix_length(a: tuple[int, ...] | list[int], b: tuple[int, ...] | list[int]) -> int:
    """How many leading tokens `a` and `b` share (a binary search over C-level slice comparisons)."""
    a, b = tuple(a), tuple(b)
    low, high = 0, min(len(a), len(b))  # a[:low] == b[:low] holds; the answer is <= high
    if a[:high] == b[:high]:
        return high
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low

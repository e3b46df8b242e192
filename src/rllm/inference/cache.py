"""The KV cache behind `LocalModel`'s continuous batching: one slot per running sequence, no padding to a common
prompt length, written in place.

transformers' own `DynamicCache` concatenates every layer's keys and values at every decode step (a copy of the
whole cache per token) and needs all rows of a batch to share one length (left padding). Here each layer holds
preallocated `[slots, kv_heads, capacity, head_dim]` buffers; sequence `i` lives in slot `i`, left-aligned, with
its own length. Every forward (a decode step, or a prefill of several prompts at once) tells the cache, per batch
row, which slot it writes and at which positions (`begin_forward`); `update` stores each row's new K/V there with
one indexed store per layer and returns the rows' slots up to the attended span, which the caller masks per row. So
the only "padding" left is the attention over the gap between a row and the longest row, cheap next to the matmuls.

Design choices:
- The cache is duck-typed (not a `transformers.Cache` subclass): Llama-style models only call
  `update(key, value, layer_idx)`; we always pass explicit position ids and a ready 4-D mask, which transformers
  uses as is.
- Active sequences always occupy slots `0..n-1`: finished rows are replaced by the last running rows, all moves of a
  step in one gather per layer, so a step never gathers scattered rows.
- Capacity (positions) and slot rows grow on demand in chunks and the buffers are dropped when the model goes
  idle, so a trainer running in the same process gets the memory back between rollout phases. A `static` cache (on
  CUDA) instead allocates every slot at once, grows in larger steps and keeps its buffers while idle: captured CUDA
  graphs hold their addresses (`generation` counts reallocations, after which they are recaptured).
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
_STATIC_CAPACITY_CHUNK = 256  # fewer reallocations, each of which invalidates the captured graphs


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
        static: bool = False,
    ) -> None:
        """`static`: allocate every slot at once, grow the positions in larger steps and keep the buffers while
        idle, so a CUDA graph captured over them stays valid (`generation` counts reallocations)."""
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        self.max_slots = max_slots
        self.max_positions = max_positions
        self.static = static
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.lengths: list[int] = []  # tokens held, per active slot (slot i = row i)
        self.generation = 0  # bumped at every (re)allocation of the buffers
        self._slots_allocated = 0
        self._capacity = 0
        # Set by `begin_forward` before each forward; read by `update`.
        self._rows: slice | None = None  # the slots the forward's batch rows write to, in order
        self._write_index: tuple[torch.Tensor, torch.Tensor] | None = None  # (slot [rows, 1], position [rows, width])
        self._span = 0  # positions attended to (keys returned by `update`)

    @property
    def num_active(self) -> int:
        return len(self.lengths)

    @property
    def capacity(self) -> int:
        return self._capacity

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
        self.generation += 1

    def reserve(self, slots: int, positions: int) -> None:
        """Make room for `slots` active rows of up to `positions` tokens each (grows, never shrinks)."""
        if positions > self.max_positions or slots > self.max_slots:
            raise ValueError(
                f"cache limit exceeded: {slots} slots x {positions} positions "
                f"(max {self.max_slots} x {self.max_positions})"
            )
        if slots <= self._slots_allocated and positions <= self._capacity:
            return
        if self.static:
            new_slots = self.max_slots
        else:
            new_slots = max(self._slots_allocated, min(self.max_slots, max(slots, 2 * self._slots_allocated, 4)))
        new_capacity = self._capacity
        if positions > self._capacity:
            chunk = _STATIC_CAPACITY_CHUNK if self.static else _CAPACITY_CHUNK
            new_capacity = min(self.max_positions, -(-(positions + chunk // 2) // chunk) * chunk)
        self._reallocate(new_slots, new_capacity)

    def release(self) -> None:
        """Drop the buffers (only when no sequence is active); a static cache keeps them."""
        assert not self.lengths, "release() with active sequences"
        if not self.static:
            self.keys, self.values = [], []
            self._slots_allocated = self._capacity = 0

    # ------------------------------------------------------------ slots

    def add_slots(self, count: int, positions: int) -> int:
        """`count` new empty rows for up to `positions` tokens each at the end of the active block; returns the
        first. The caller fills them by a prefill, `copy_prefix` or `write_prefix`."""
        first = self.num_active
        self.reserve(first + count, max(positions, *self.lengths, 1))
        self.lengths.extend([0] * count)
        return first

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
        """Fill `slot` with a `read_prefix` copy; a prefill starting at `kv.shape[3]` then appends the rest."""
        length = kv.shape[3]
        for layer in range(self.num_layers):
            self.keys[layer][slot, :, :length] = kv[layer, 0]
            self.values[layer][slot, :, :length] = kv[layer, 1]
        self.lengths[slot] = length

    def move_slots(self, targets: list[int], sources: list[int]) -> None:
        """Slot `sources[i]` becomes slot `targets[i]` (one gather per layer whatever the number of moves)."""
        if not targets:
            return
        span = max(self.lengths[s] for s in sources)
        target = torch.tensor(targets, device=self.device)
        source = torch.tensor(sources, device=self.device)
        for layer in range(self.num_layers):
            self.keys[layer][target, :, :span] = self.keys[layer][source, :, :span]
            self.values[layer][target, :, :span] = self.values[layer][source, :, :span]
        for t, s in zip(targets, sources, strict=True):
            self.lengths[t] = self.lengths[s]

    def truncate(self, count: int) -> None:
        """Keep the first `count` active slots (the rest finished and their rows moved away)."""
        del self.lengths[count:]

    # ------------------------------------------------------------ forward passes

    def begin_forward(self, rows: slice, slot_index: torch.Tensor, write_positions: torch.Tensor, span: int) -> None:
        """The next forward's batch row i writes its tokens' K/V to slot `rows.start + i` at `write_positions[i]`
        ([rows, tokens]) and attends to that slot's first `span` positions (`slot_index` is `[rows, 1]`)."""
        self._rows = rows
        self._write_index = (slot_index, write_positions)
        self._span = span

    def end_forward(self) -> None:
        self._rows = self._write_index = None

    # ------------------------------------------------------------ what transformers calls

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        slots, positions = self._write_index
        # [rows, heads, tokens, dim] -> [rows, tokens, heads, dim], the layout of `buffer[slots, :, positions]`
        self.keys[layer_idx][slots, :, positions] = key.transpose(1, 2)
        self.values[layer_idx][slots, :, positions] = value.transpose(1, 2)
        return self.keys[layer_idx][self._rows, :, : self._span], self.values[layer_idx][self._rows, :, : self._span]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.lengths, default=0)

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return 0  # never asked: every forward passes a ready 4-D mask

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._span, 0


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

"""Sampling one next token for every running sequence of `LocalModel`, with its log-probability, on the logits'
device and without a host synchronisation.

Logprob convention (the trainer relies on it): the log-probability of the sampled token under
`softmax(logits / temperature)`, with temperature 1 for greedy rows, computed BEFORE top-k/top-p truncation. A
trainer that recomputes log-probs of the same ids with the same temperature gets the same numbers (up to float
rounding); the truncation only changes which tokens can be drawn.

Randomness: each request owns a stream of uniforms drawn once, at admission, on the model's device from its own
`torch.Generator` seeded with the request's seed (on a CPU these are the same numbers as the CPU-only releases drew).
Step `t` of a request uses `u_t` and inverts the CDF of its (possibly truncated) distribution at `u_t`. So a request's
sample depends only on its seed and its own logits, never on what else is in the batch or on how rows are ordered.

Every row of a batch goes through the same few tensor operations whatever its settings (a greedy row's argmax and a
sampled row's draw are both computed and one is selected), so the work dispatched per step does not grow with the
number of rows or with how their settings mix. Which operations run is chosen on the host from settings the host
knows (`SamplingMode`), never by reading a device value, so the step can be captured in a CUDA graph.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["RowSampler", "SamplingMode", "draw_uniforms", "sample_rows"]


@dataclass
class RowSampler:
    """How one request samples: `temperature` 0 is greedy; `uniforms[t]` drives step t (None when greedy)."""

    temperature: float
    top_k: int
    top_p: float
    uniforms: Tensor | None  # float64 on the model's device

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def truncates(self) -> bool:
        return not self.greedy and (self.top_k > 0 or self.top_p < 1.0)

    @property
    def mode(self) -> SamplingMode:
        return SamplingMode.GREEDY if self.greedy else SamplingMode.TRUNCATED if self.truncates else SamplingMode.PLAIN


class SamplingMode(enum.IntEnum):
    """The most general kind of row in a batch; a mode handles every kind below it too."""

    GREEDY = 0  # argmax only
    PLAIN = 1  # + inverse-CDF draws over the whole vocabulary
    TRUNCATED = 2  # + top-k / top-p over the sorted vocabulary


def draw_uniforms(seed: int, count: int, device: torch.device | str = "cpu") -> Tensor:
    """The request's whole stream of uniforms in [0, 1), float64 (so the CDF inversion is not coarser than fp32),
    drawn on `device` by a generator of that device."""
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.rand(count, generator=generator, dtype=torch.float64, device=device)


def sample_rows(
    logits: Tensor,
    *,
    temperatures: Tensor,
    greedy: Tensor,
    top_k: Tensor,
    top_p: Tensor,
    uniforms: Tensor,
    mode: SamplingMode,
) -> tuple[Tensor, Tensor]:
    """One token per row of `logits` ([rows, vocab]) and its log-probability (float32), both on the logits' device.

    Per row: `temperatures` (1 for greedy rows), `greedy` (bool), `top_k` (0: off), `top_p` (1: off), `uniforms`
    (this step's draw). `mode` is the most general row kind present (see `SamplingMode`)."""
    scaled = logits.float() / temperatures[:, None]
    log_norm = torch.logsumexp(scaled, dim=-1)
    tokens = logits.argmax(dim=-1)
    if mode >= SamplingMode.PLAIN:
        probs = torch.exp(scaled - log_norm[:, None])
        drawn = _invert_cdf(probs, uniforms)
        if mode == SamplingMode.TRUNCATED:
            drawn = torch.where((top_k > 0) | (top_p < 1.0), _sample_truncated(scaled, top_k, top_p, uniforms), drawn)
        tokens = torch.where(greedy, tokens, drawn)
    chosen = scaled.gather(1, tokens[:, None]).squeeze(1)
    return tokens, chosen - log_norm


def _invert_cdf(probs: Tensor, uniforms: Tensor) -> Tensor:
    """Index of the first token whose cumulative mass exceeds `u * total` (per row). `right=True` so a zero-mass
    token at the front can never be picked."""
    cdf = torch.cumsum(probs.double(), dim=-1)
    targets = (uniforms.double() * cdf[:, -1])[:, None]
    picked = torch.searchsorted(cdf, targets, right=True).squeeze(1)
    return picked.clamp_(max=probs.shape[-1] - 1)


def _sample_truncated(scaled: Tensor, top_k: Tensor, top_p: Tensor, uniforms: Tensor) -> Tensor:
    """Top-k then top-p (nucleus) over each row's sorted logits; the kept tokens are renormalised. A row with
    neither setting keeps the whole vocabulary."""
    vocab = scaled.shape[-1]
    values, order = torch.sort(scaled, dim=-1, descending=True)
    keep_k = torch.where((top_k > 0) & (top_k < vocab), top_k, vocab)
    rank = torch.arange(vocab, device=scaled.device)
    values = values.masked_fill(rank[None, :] >= keep_k[:, None], float("-inf"))
    probs = torch.softmax(values, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    # The first token always stays (its mass before is 0); rows without top-p keep everything the top-k kept.
    nucleus = (mass_before < top_p[:, None]) | (top_p[:, None] >= 1.0)
    probs = torch.where(nucleus, probs, torch.zeros_like(probs))
    return order.gather(1, _invert_cdf(probs, uniforms)[:, None]).squeeze(1)

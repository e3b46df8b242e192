"""Sampling one next token for every running sequence of `LocalModel`, with its log-probability.

Logprob convention (the trainer relies on it): the log-probability of the sampled token under
`softmax(logits / temperature)`, with temperature 1 for greedy rows, computed BEFORE top-k/top-p truncation. A
trainer that recomputes log-probs of the same ids with the same temperature gets the same numbers (up to float
rounding); the truncation only changes which tokens can be drawn.

Randomness: each request owns a stream of uniforms drawn once, at admission, from its own `torch.Generator`
(seeded from the request's seed). Step `t` of a request draws `u_t` and inverts the CDF of its (possibly
truncated) distribution at `u_t`. So a request's sample depends only on its seed and its own logits, never on what
else is in the batch or on how rows are ordered, and no per-step generator calls are needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["RowSampler", "draw_uniforms", "sample_next_tokens"]


@dataclass
class RowSampler:
    """How one request samples: `temperature` 0 is greedy; `uniforms[t]` drives step t (None when greedy)."""

    temperature: float
    top_k: int
    top_p: float
    uniforms: list[float] | None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def truncates(self) -> bool:
        return not self.greedy and (self.top_k > 0 or self.top_p < 1.0)


def draw_uniforms(seed: int, count: int) -> list[float]:
    """The request's whole stream of uniforms in [0, 1), as float64 so the CDF inversion is not coarser than fp32."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return torch.rand(count, generator=generator, dtype=torch.float64).tolist()


def sample_next_tokens(
    logits: torch.Tensor, samplers: list[RowSampler], steps: list[int]
) -> tuple[list[int], list[float]]:
    """One token per row of `logits` ([rows, vocab]); `steps[i]` is how many tokens row i already sampled.

    Full-vocab work is one logsumexp for all rows (needed for the logprobs) plus, for sampled rows, one exp and
    cumsum; sorting happens only for rows that ask for top-p (top-k alone uses `topk`).
    """
    logits = logits.float().cpu()  # on a GPU: one [rows, vocab] copy per step; the uniforms and ids live on the CPU
    rows = logits.shape[0]
    temperatures = torch.tensor([s.temperature if not s.greedy else 1.0 for s in samplers], dtype=torch.float32)
    scaled = logits if bool((temperatures == 1.0).all()) else logits / temperatures[:, None]
    log_norm = torch.logsumexp(scaled, dim=-1)
    tokens = torch.empty(rows, dtype=torch.long)

    greedy_rows = [i for i, s in enumerate(samplers) if s.greedy]
    plain_rows = [i for i, s in enumerate(samplers) if not s.greedy and not s.truncates]
    truncated_rows = [i for i, s in enumerate(samplers) if s.truncates]
    if greedy_rows:
        index = torch.tensor(greedy_rows)
        tokens[index] = logits[index].argmax(dim=-1)
    if plain_rows:
        index = torch.tensor(plain_rows)
        probs = torch.exp(scaled[index] - log_norm[index, None])
        uniforms = torch.tensor([samplers[i].uniforms[steps[i]] for i in plain_rows], dtype=torch.float64)
        tokens[index] = _invert_cdf(probs, uniforms)
    for i in truncated_rows:
        tokens[i] = _sample_truncated(scaled[i], samplers[i], samplers[i].uniforms[steps[i]])

    chosen = scaled.gather(1, tokens[:, None]).squeeze(1)
    logprobs = (chosen - log_norm).tolist()
    return tokens.tolist(), logprobs


def _invert_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Index of the first token whose cumulative mass exceeds `u * total` (per row). `right=True` so a zero-mass
    token at the front can never be picked."""
    cdf = torch.cumsum(probs.double(), dim=-1)
    targets = (uniforms.double() * cdf[:, -1])[:, None]
    picked = torch.searchsorted(cdf, targets, right=True).squeeze(1)
    return picked.clamp_(max=probs.shape[-1] - 1)


def _sample_truncated(scaled: torch.Tensor, sampler: RowSampler, uniform: float) -> int:
    """Top-k then top-p (nucleus) over one row; the kept tokens are renormalised."""
    vocab = scaled.shape[0]
    keep_k = sampler.top_k if 0 < sampler.top_k < vocab else vocab
    if sampler.top_p < 1.0 or keep_k == vocab:
        values, order = torch.sort(scaled, descending=True)
        values, order = values[:keep_k], order[:keep_k]
    else:
        values, order = torch.topk(scaled, keep_k)  # sorted, largest first
    probs = torch.softmax(values, dim=-1)
    if sampler.top_p < 1.0:
        mass_before = torch.cumsum(probs, dim=-1) - probs
        probs = torch.where(mass_before < sampler.top_p, probs, torch.zeros_like(probs))  # keeps at least one
    picked = _invert_cdf(probs[None, :], torch.tensor([uniform], dtype=torch.float64))
    return int(order[picked.item()])

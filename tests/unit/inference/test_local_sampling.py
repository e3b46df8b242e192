"""The local engine's sampler (`rllm.inference.sampling`): the right distribution for every setting, greedy equal to
argmax, untruncated log-probs, rows independent of each other, and on a CPU the same seeded draws as the
per-row host sampler of earlier releases (so seeded runs reproduce)."""

from __future__ import annotations

import pytest
import torch

from rllm.inference.sampling import SamplingMode, draw_uniforms, sample_rows


def _sample(logits, temperature=1.0, top_k=0, top_p=1.0, uniforms=None, greedy=None):
    rows = logits.shape[0]
    greedy = torch.zeros(rows, dtype=torch.bool) if greedy is None else greedy
    full = lambda value, dtype: value if torch.is_tensor(value) else torch.full((rows,), value, dtype=dtype)  # noqa: E731
    top_k, top_p = full(top_k, torch.long), full(top_p, torch.float32)
    truncates = bool(((top_k > 0) | (top_p < 1.0)).any())
    mode = (
        SamplingMode.TRUNCATED if truncates else SamplingMode.PLAIN if not bool(greedy.all()) else SamplingMode.GREEDY
    )
    return sample_rows(
        logits,
        temperatures=torch.where(greedy, 1.0, full(temperature, torch.float32)),
        greedy=greedy,
        top_k=top_k,
        top_p=top_p,
        uniforms=uniforms if uniforms is not None else torch.rand(rows, dtype=torch.float64),
        mode=mode,
    )


def _truncated_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The exact distribution top-k then top-p sampling draws from (by definition, one row)."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    order = probs.argsort(descending=True)
    keep = torch.zeros_like(probs, dtype=torch.bool)
    mass = 0.0
    for rank, token in enumerate(order.tolist()):
        if (top_k and rank >= top_k) or mass >= top_p:
            break
        keep[token] = True
        mass += probs[token].item()
    kept = torch.where(keep, probs, 0.0)
    return kept / kept.sum()


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 3, 1.0), (1.0, 0, 0.8), (0.9, 4, 0.7)]
)
def test_empirical_frequencies_match_the_exact_distribution(temperature, top_k, top_p):
    """20,000 rows of the same logits with 20,000 seeds: token frequencies within 0.015 of the exact probabilities
    (about 5 standard errors), and nothing outside the kept set is ever drawn."""
    generator = torch.Generator().manual_seed(0)
    row = torch.randn(8, generator=generator) * 1.5
    samples = 20_000
    uniforms = torch.stack([draw_uniforms(seed, 1)[0] for seed in range(samples)])
    tokens, logprobs = _sample(row.expand(samples, -1).contiguous(), temperature, top_k, top_p, uniforms)
    frequencies = torch.bincount(tokens, minlength=8).double() / samples
    exact = _truncated_probs(row, temperature, top_k, top_p)
    assert (frequencies - exact).abs().max() < 0.015
    assert frequencies[exact == 0].sum() == 0
    # log-probs are those of the untruncated softmax at the temperature, whatever the truncation
    expected = torch.log_softmax(row / temperature, dim=-1)[tokens]
    assert torch.allclose(logprobs, expected, atol=1e-6)


def test_greedy_rows_take_the_argmax_with_temperature_one_logprobs():
    logits = torch.randn(64, 1000, generator=torch.Generator().manual_seed(1)) * 3
    tokens, logprobs = _sample(logits, greedy=torch.ones(64, dtype=torch.bool))
    assert torch.equal(tokens, logits.argmax(dim=-1))
    assert torch.allclose(logprobs, torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1), atol=1e-6)


def test_a_row_does_not_depend_on_the_other_rows():
    """Mixed settings in one batch, then the same rows shuffled: each row draws the same token."""
    generator = torch.Generator().manual_seed(2)
    rows = 12
    logits = torch.randn(rows, 500, generator=generator) * 2
    greedy = torch.tensor([i % 4 == 0 for i in range(rows)])
    top_k = torch.tensor([5 if i % 4 == 1 else 0 for i in range(rows)])
    top_p = torch.tensor([0.6 if i % 4 == 2 else 1.0 for i in range(rows)])
    temperature = torch.tensor([0.5 + 0.1 * i for i in range(rows)])
    uniforms = torch.rand(rows, dtype=torch.float64, generator=generator)
    tokens, logprobs = _sample(logits, temperature, top_k, top_p, uniforms, greedy)
    order = torch.randperm(rows, generator=generator)
    shuffled, shuffled_logprobs = _sample(
        logits[order], temperature[order], top_k[order], top_p[order], uniforms[order], greedy[order]
    )
    assert torch.equal(shuffled, tokens[order])
    assert torch.equal(shuffled_logprobs, logprobs[order])
    for i in range(rows):  # alone, each row draws what it drew in the batch
        alone, _ = _sample(
            logits[i : i + 1],
            temperature[i : i + 1],
            top_k[i : i + 1],
            top_p[i : i + 1],
            uniforms[i : i + 1],
            greedy[i : i + 1],
        )
        assert alone.item() == tokens[i].item()


def _host_sampler_of_earlier_releases(logits, temperature, uniform):
    """What releases up to 0.x drew for a plain (untruncated) row on the host: the seeded results a user's runs hold."""
    scaled = logits.float() / temperature
    log_norm = torch.logsumexp(scaled, dim=-1)
    cdf = torch.cumsum(torch.exp(scaled - log_norm).double(), dim=-1)
    token = int(torch.searchsorted(cdf, uniform * cdf[-1:], right=True).clamp(max=logits.shape[-1] - 1))
    return token, (scaled[token] - log_norm).item()


def test_seeded_cpu_draws_are_those_of_earlier_releases():
    """Same seeds, same logits: the batched device sampler draws bitwise the tokens and log-probs the per-row host
    sampler drew (so `make demo` and every seeded CPU run reproduce across the change)."""
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(32, 49152, generator=generator) * 4
    temperature = 0.9
    uniforms = torch.stack([draw_uniforms(seed, 5)[3] for seed in range(32)])
    assert (
        draw_uniforms(7, 5).tolist()
        == torch.rand(5, generator=torch.Generator().manual_seed(7), dtype=torch.float64).tolist()
    )
    tokens, logprobs = _sample(logits, temperature, uniforms=uniforms)
    for i in range(32):
        assert (tokens[i].item(), logprobs[i].item()) == _host_sampler_of_earlier_releases(
            logits[i], temperature, uniforms[i].item()
        )

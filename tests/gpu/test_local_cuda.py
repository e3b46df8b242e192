"""LocalModel on a CUDA device: decode steps replayed from CUDA graphs give what eager steps give, only the new ids and
log-probs cross to the host, and the on-device sampler draws the right distribution. Skipped without a GPU (CI has
none); `benchmarks/gpu_run.sh` runs them on a lent GPU, and the CPU stand-ins of the same properties are in
tests/unit/inference/test_local_decode_step.py and test_local_sampling.py."""

from __future__ import annotations

import asyncio

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rllm.inference import InferenceOptions
from rllm.inference.model import LocalModel
from rllm.inference.sampling import SamplingMode, sample_rows
from rllm.models.base import SamplingParams
from tests.support.models import sharpen

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


def _model(tokenizer, architecture: str, dtype=torch.float32):
    from rllm.models.registry import build_tiny_model

    model = sharpen(build_tiny_model(tokenizer, num_layers=3, architecture=architecture))
    return model.to("cuda", dtype)


def _requests(tokenizer, count: int = 20):
    words = "the a cat dog sat ran on under mat log and then slowly quickly".split()
    prompts = [
        tokenizer.encode(" ".join(words[(i * 5 + j) % len(words)] for j in range(4 + i % 17))) for i in range(count)
    ]
    return [
        (p, SamplingParams(temperature=0.0 if i % 2 else 1.0, max_tokens=4 + 3 * i, seed=i))
        for i, p in enumerate(prompts)
    ]


def _run(local, requests):
    async def go():
        return await asyncio.gather(*[local.generate(p, s) for p, s in requests])

    return asyncio.run(go())


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_graph_replayed_steps_give_what_eager_steps_give(tokenizer, architecture):
    model, requests = _model(tokenizer, architecture), _requests(tokenizer)
    with LocalModel(
        model, tokenizer, InferenceOptions(max_batch_size=32, eos_token_ids=(), cuda_graphs=False)
    ) as eager:
        expected = _run(eager, requests)
    with LocalModel(model, tokenizer, InferenceOptions(max_batch_size=32, eos_token_ids=())) as graphed:
        _run(graphed, requests)  # warm-up: the first step at each shape runs eagerly
        got = _run(graphed, requests)
        stats, graphs = graphed.stats, graphed._scheduler.graphs
        assert not graphs.disabled and graphs.graphs
        assert stats["graph_steps"] > stats["decode_steps"] // 2
        graphs.reset()  # what a reallocated K/V cache or a replaced weight does: every graph is captured again
        _run(graphed, requests)
        again = _run(graphed, requests)
        assert not graphs.disabled and graphs.graphs
    greedy = [i for i, (_, sampling) in enumerate(requests) if sampling.greedy]
    assert [again[i].completion_ids for i in greedy] == [got[i].completion_ids for i in greedy]
    same = 0
    for (_, sampling), a, b in zip(requests, got, expected, strict=True):
        assert torch.allclose(torch.tensor(a.logprobs[:1]), torch.tensor(b.logprobs[:1]), atol=1e-4)
        if sampling.greedy:
            assert a.completion_ids == b.completion_ids
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
        same += a.completion_ids == b.completion_ids
    assert same >= 0.9 * len(requests)  # sampled rows may flip at a rounding boundary, rarely


class _HostCopies(TorchDispatchMode):
    """Bytes copied from the GPU to the host by dispatched operators."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if isinstance(out, torch.Tensor) and out.device.type == "cpu" and source is not None and source.is_cuda:
            self.bytes += out.numel() * out.element_size()
        return out


def test_only_ids_and_logprobs_cross_to_the_host(tokenizer):
    model = _model(tokenizer, "llama", torch.bfloat16)
    rows = 16
    requests = [
        (p, SamplingParams(temperature=1.0, max_tokens=24, seed=i))
        for i, (p, _) in enumerate(_requests(tokenizer, rows))
    ]
    with LocalModel(model, tokenizer, InferenceOptions(max_batch_size=rows, eos_token_ids=())) as local:
        scheduler = local._scheduler
        step = scheduler.step
        copied = []

        def counted():
            with _HostCopies() as mode:
                step()
            copied.append(mode.bytes)

        scheduler.step = counted
        _run(local, requests)
    assert copied and max(copied) <= 2 * 8 * rows  # ids + log-probs as float64, nothing of [rows, vocab]


def test_the_device_sampler_draws_the_exact_distribution():
    row = torch.randn(8, generator=torch.Generator().manual_seed(0)).cuda() * 1.5
    samples = 50_000
    uniforms = torch.rand(samples, dtype=torch.float64, device="cuda")
    ones = torch.ones(samples, device="cuda")
    tokens, logprobs = sample_rows(
        row.expand(samples, -1).contiguous(),
        temperatures=ones,
        greedy=torch.zeros(samples, dtype=torch.bool, device="cuda"),
        top_k=torch.zeros(samples, dtype=torch.long, device="cuda"),
        top_p=ones * 0.8,
        uniforms=uniforms,
        mode=SamplingMode.TRUNCATED,
    )
    probs = torch.softmax(row.double(), -1)
    order = probs.argsort(descending=True)
    kept = (torch.cumsum(probs[order], 0) - probs[order]) < 0.8
    exact = torch.zeros_like(probs)
    exact[order[kept]] = probs[order[kept]] / probs[order[kept]].sum()
    frequencies = torch.bincount(tokens, minlength=8).double() / samples
    assert (frequencies - exact).abs().max() < 0.01
    assert torch.allclose(logprobs, torch.log_softmax(row, -1)[tokens], atol=1e-5)

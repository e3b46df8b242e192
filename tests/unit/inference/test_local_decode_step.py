"""The local engine's decode step as a GPU needs it: a fixed number of operators whatever the batch (no more than
transformers `generate` dispatches), no host synchronisation inside it (so a CUDA graph can hold it), and padded
graph-shaped steps that give what the eager steps give. Measured on a CPU: the dispatcher, the meta device and a
capture that reruns the step stand in for the GPU."""

from __future__ import annotations

import asyncio

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rllm.inference import InferenceOptions
from rllm.inference.graphs import DecodeGraphs, row_buckets
from rllm.inference.model import LocalModel
from rllm.inference.sampling import SamplingMode
from rllm.models.base import SamplingParams
from rllm.models.registry import build_tiny_model
from rllm.testing.ops import decode_step_ops, generate_step_ops
from tests.support.models import sharp_tiny_model


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


def _prompts(tokenizer, count: int) -> list[list[int]]:
    words = "the a cat dog sat ran on under mat log and then slowly quickly".split()
    return [
        tokenizer.encode(" ".join(words[(i * 7 + j) % len(words)] for j in range(5 + i % 23))) for i in range(count)
    ]


def test_a_decode_step_dispatches_the_same_operators_for_8_64_and_128_rows(tokenizer):
    model = build_tiny_model(tokenizer, num_layers=4)
    counts = {}
    for rows in (8, 64, 128):
        with LocalModel(
            model, tokenizer, InferenceOptions(max_batch_size=rows, eos_token_ids=(), prefix_cache_tokens=0)
        ) as local:
            per_step = decode_step_ops(local, _prompts(tokenizer, rows))
        assert per_step and len(set(per_step)) == 1, per_step
        counts[rows] = per_step[0]
    assert counts[8] == counts[64] == counts[128], counts
    generate = generate_step_ops(model, tokenizer.pad_token_id, _prompts(tokenizer, 8))
    assert counts[8] <= 1.5 * generate, (counts, generate)


class _NoHostSync(TorchDispatchMode):
    """Fails on anything a CUDA graph cannot hold: a tensor on another device (a host copy) or a value read back."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default):
            raise AssertionError(f"{func} reads a device value on the host")
        tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        off = [t.device for t in tensors if t.device.type != "meta"]
        if off:
            raise AssertionError(f"{func} touches a tensor on {off[0]}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
@pytest.mark.parametrize("mode", list(SamplingMode))
def test_the_decode_step_never_waits_on_the_device(tokenizer, mode, architecture):
    """The whole step on the meta device (shapes, no data): a `.item()`, a `.tolist()` or a host tensor would fail."""
    model = build_tiny_model(tokenizer, num_layers=2, architecture=architecture).to("meta")
    local = LocalModel(model, tokenizer, InferenceOptions(max_batch_size=8))
    scheduler = local._scheduler
    scheduler.cache.reserve(8, 256)
    with torch.inference_mode(), _NoHostSync():
        scheduler._decode(8, 256, mode)
    local.close()


class _Rerun:
    """A stand-in for a CUDA graph on a CPU: `replay` runs the captured step again on the tensors it reads now."""

    captured = 0

    def __init__(self, step):
        self.step = step
        _Rerun.captured += 1

    def replay(self):
        self.step()


def _with_rerun_graphs(model: LocalModel) -> LocalModel:
    scheduler = model._scheduler
    scheduler.cache.static = True  # as on CUDA: the buffers a graph reads stay put
    scheduler.graphs = DecodeGraphs(model.max_batch_size, capture=_Rerun)
    return model


def test_graph_shaped_steps_give_what_eager_steps_give(tokenizer):
    """Rows padded to a bucket and spans rounded up, replayed from a capture, with rows finishing at different
    steps (the bucket shrinks): the same tokens and log-probs as unpadded eager steps."""
    model = sharp_tiny_model(tokenizer, seed=0)
    prompts = _prompts(tokenizer, 11)
    requests = [
        (
            p,
            SamplingParams(
                temperature=0.0 if i % 3 == 0 else 1.0, top_p=0.9 if i % 3 == 2 else 1.0, max_tokens=3 + 2 * i, seed=i
            ),
        )
        for i, p in enumerate(prompts)
    ]

    async def run(local):
        return await asyncio.gather(*[local.generate(p, s) for p, s in requests])

    with LocalModel(model, tokenizer, InferenceOptions(max_batch_size=16, eos_token_ids=())) as eager:
        expected = asyncio.run(run(eager))
    _Rerun.captured = 0
    with _with_rerun_graphs(
        LocalModel(model, tokenizer, InferenceOptions(max_batch_size=16, eos_token_ids=()))
    ) as graphed:
        got = asyncio.run(run(graphed))
        assert graphed.stats["graph_steps"] == graphed.stats["decode_steps"]
    assert _Rerun.captured >= 3  # several row buckets as rows finished
    for a, b in zip(got, expected, strict=True):
        assert a.completion_ids == b.completion_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_graphs_warm_up_capture_replay_and_drop_when_buffers_move():
    graphs = DecodeGraphs(64, capture=_Rerun)
    calls = []

    def body(rows, span, mode):
        calls.append((rows, span, mode))

    assert graphs.run(5, 100, SamplingMode.PLAIN, 512, (0, 0), body)  # warm-up: eager at the padded shape
    assert calls == [(8, 256, SamplingMode.PLAIN)] and not graphs.graphs
    assert graphs.run(7, 200, SamplingMode.PLAIN, 512, (0, 0), body)  # same bucket: captured, then replayed
    assert len(graphs.graphs) == 1 and calls[-1] == (8, 256, SamplingMode.PLAIN)
    assert graphs.run(7, 257, SamplingMode.PLAIN, 300, (0, 0), body) and calls[-1] == (8, 300, SamplingMode.PLAIN)
    assert graphs.run(7, 200, SamplingMode.PLAIN, 512, (1, 0), body)  # the buffers moved: everything recaptured
    assert not graphs.graphs and len(graphs.warmed) == 1
    assert not graphs.run(65, 10, SamplingMode.PLAIN, 512, (1, 0), body)  # past the largest bucket: eager
    assert row_buckets(64)[-1] == 64 and row_buckets(100)[-2:] == [96, 100]


def test_a_failed_capture_turns_graphs_off_and_the_step_runs_eagerly(caplog):
    def broken(step):
        raise RuntimeError("operation not permitted when stream is capturing")

    graphs = DecodeGraphs(8, capture=broken)
    body = lambda rows, span, mode: None  # noqa: E731
    assert graphs.run(3, 10, SamplingMode.GREEDY, 256, (0, 0), body)  # warm-up
    assert not graphs.run(3, 10, SamplingMode.GREEDY, 256, (0, 0), body)
    assert graphs.disabled and "decoding eagerly" in caplog.text
    assert not graphs.run(3, 10, SamplingMode.GREEDY, 256, (0, 0), body)

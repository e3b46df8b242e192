"""Packed oneDNN linears (`rllm.inference.packed_linears`): the same results as `F.linear` up to float rounding, never a
stale weight, only on the thread that asked, out of autograd's way, and a copied model keeps its own weights; and
LocalModel runs its linears packed where rllm.runtime enables it (the tests run with it on, `tuned_runtime`), torch's
otherwise. (The private oneDNN ops themselves: tests/unit/runtime/test_runtime.py.)"""

from __future__ import annotations

import asyncio
import copy
import gc
import threading

import pytest
import torch
import torch.nn.functional as F

from rllm import runtime
from rllm.inference import InferenceOptions, packed_linears
from rllm.inference.kernels import PACKED, KernelChoice
from rllm.inference.lm_head import output_logits
from rllm.inference.model import LocalModel
from rllm.inference.packed_linears import PackedLinears, linear, packed_linears_active, packed_linears_available
from rllm.models.base import SamplingParams
from tests.support.models import sharp_tiny_model

# what this torch build can do (packed_linears_available() also asks rllm.runtime, off outside `tuned_runtime`)
ONEDNN = torch.backends.mkldnn.is_available() and packed_linears._onednn_packs()
pytestmark = [
    pytest.mark.skipif(not ONEDNN, reason="this torch build cannot pack with oneDNN"),
    pytest.mark.usefixtures("tuned_runtime"),
]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def _installed(module: torch.nn.Module) -> PackedLinears:
    packed = PackedLinears(KernelChoice.fixed(PACKED))  # the packed path itself (the choice: test_kernels.py)
    packed.install(module)
    return packed


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(5, 48), (3, 7, 48), (1, 48), (33, 48), (3, 233, 48)])  # 33, 699 rows: padded
def test_packed_linear_matches_f_linear(bias, shape):
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 80, bias=bias)
    x = torch.randn(shape)
    packed = _installed(layer)
    with torch.inference_mode():
        expected = F.linear(x, layer.weight, layer.bias)
        assert torch.equal(layer(x), expected)  # routed, but nothing active: torch's own path
        with packed:
            got = layer(x)
            again = layer(x * 2)
    assert packed.calls == 2 and packed.packs == 1  # packed once, used twice
    assert got.shape == expected.shape and _close(got, expected)
    assert _close(again, F.linear(x * 2, layer.weight, layer.bias))


@pytest.mark.parametrize("change", ["copy_", "optimizer", "data"])
def test_a_changed_weight_is_repacked(change):
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 16, bias=False)
    x = torch.randn(4, 32)
    packed = _installed(layer)
    with torch.inference_mode(), packed:
        before = layer(x)
    if change == "copy_":
        with torch.no_grad():
            layer.weight.copy_(torch.randn(16, 32))
    elif change == "optimizer":
        optimizer = torch.optim.SGD(layer.parameters(), lr=1.0)
        layer(x).square().sum().backward()
        optimizer.step()
    else:
        layer.weight.data = torch.randn(16, 32)
    with torch.inference_mode(), packed:
        after = layer(x)
    assert packed.packs == 2
    assert not _close(after, before)
    assert _close(after, F.linear(x, layer.weight.detach()))


def test_only_the_thread_that_entered_runs_packed():
    layer = torch.nn.Linear(16, 16)
    x = torch.randn(2, 16)
    seen = {}

    def other_thread():
        seen["active"] = packed_linears_active()
        with torch.inference_mode():
            layer(x)

    with torch.inference_mode(), _installed(layer) as packed:
        assert packed_linears_active()
        layer(x)
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert packed.calls == 1 and seen == {"active": False}
    assert not packed_linears_active()


def test_a_trained_weight_keeps_torch_path_and_gradients():
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)
    with _installed(layer) as packed:
        layer(x).sum().backward()
        with torch.no_grad():
            layer(x)
    assert layer.weight.grad is not None and torch.allclose(layer.weight.grad, x.sum(0).expand(4, 8))
    assert packed.calls == 1  # only the no-grad call


def test_other_dtypes_run_f_linear():
    layer = torch.nn.Linear(8, 4).to(torch.bfloat16)
    with torch.inference_mode(), _installed(layer) as packed:
        out = layer(torch.randn(2, 8, dtype=torch.bfloat16))
    assert packed.calls == 0 and out.dtype == torch.bfloat16


def test_a_freed_weight_drops_its_packed_copy():
    layer = torch.nn.Linear(8, 4)
    packed = _installed(layer)
    with torch.inference_mode(), packed:
        layer(torch.randn(2, 8))
    assert len(packed._packed) == 1
    del layer
    gc.collect()
    assert len(packed._packed) == 0


def test_the_output_layer_runs_whole_under_the_mode():
    torch.manual_seed(0)
    head = torch.nn.Linear(24, 3000, bias=False)  # more rows than one CPU slice: the MKL path would slice it
    hidden = torch.randn(5, 24)
    with torch.inference_mode():
        plain = output_logits(head, hidden)
        with PackedLinears(KernelChoice.fixed(PACKED)) as packed:
            got = output_logits(head, hidden)
    assert packed.calls == 1 and packed.packs == 1  # one packed weight, not one per slice
    assert _close(got, plain)


def test_a_copied_or_saved_model_is_plain_and_computes_with_its_own_weights(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    packed = _installed(model)
    assert packed.install(model) == 2  # idempotent
    twin = copy.deepcopy(model)
    torch.save(model, tmp_path / "model.pt")
    saved = torch.load(tmp_path / "model.pt", weights_only=False)
    with torch.no_grad():
        for param in twin.parameters():
            param.mul_(-1)
    x = torch.randn(4, 8)

    def plain(m):
        return F.linear(torch.relu(F.linear(x, *m[0].parameters())), *m[2].parameters())

    with torch.inference_mode(), packed:
        ours, theirs, loaded = model(x), twin(x), saved(x)
    assert packed.calls == 2  # the copies run torch's forward: the routing is not copied
    assert _close(ours, plain(model)) and torch.equal(theirs, plain(twin)) and torch.equal(loaded, plain(model))
    assert packed.install(twin) == 2
    with torch.inference_mode(), packed:
        assert _close(twin(x), plain(twin))
    assert packed.calls == 4


def test_linear_outside_an_active_packer_is_f_linear():
    x, weight = torch.randn(3, 8), torch.randn(5, 8)
    assert torch.equal(linear(x, weight), F.linear(x, weight))
    packer = PackedLinears()
    with packer, packer:  # re-entrant
        assert packed_linears_active()
    assert not packed_linears_active()
    with pytest.raises(RuntimeError, match="already active"), PackedLinears(), PackedLinears():
        pass
    assert not packed_linears_active()


def test_the_runtime_switches_it():
    assert packed_linears_available()
    with runtime.enabled(runtime.RuntimeOptions(packed_linears=False)):
        assert not packed_linears_available()
    runtime.disable()  # a library user who did not opt in
    assert not packed_linears_available()


def test_local_model_runs_packed_and_follows_in_place_training_updates(smollm2_tokenizer):
    """The trainer and LocalModel share the module on a CPU: an optimizer step changes the weights in place, and the
    next rollout must sample from the new weights (a stale packed copy would not)."""
    model = sharp_tiny_model(smollm2_tokenizer, 0)
    prompt = smollm2_tokenizer.encode("The cat sat on the mat and")
    greedy = SamplingParams(temperature=0.0, max_tokens=6)

    def plain_greedy() -> list[int]:
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(6):
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        return ids[len(prompt) :]

    packed = PackedLinears(KernelChoice.fixed(PACKED))
    with LocalModel(model, smollm2_tokenizer, InferenceOptions(prefix_cache_tokens=0), packed=packed) as local:
        first = asyncio.run(local.generate(prompt, greedy))
        assert local.packed_linears and local._linears.calls > 0
        assert first.completion_ids == plain_greedy()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        logits = model(input_ids=torch.tensor([prompt + first.completion_ids])).logits
        logits[0, len(prompt) - 1 :].logsumexp(-1).sum().backward()  # any loss moving every layer
        optimizer.step()
        second = asyncio.run(local.generate(prompt, greedy))
        assert second.completion_ids == plain_greedy() != first.completion_ids
    assert not LocalModel(model, smollm2_tokenizer, InferenceOptions(packed_linears=False)).packed_linears
    runtime.disable()  # a library user who did not opt in: torch's path, no module routed
    plain = LocalModel(sharp_tiny_model(smollm2_tokenizer, 1), smollm2_tokenizer)
    assert not plain.packed_linears
    assert not any("forward" in vars(m) for m in plain.model.modules() if isinstance(m, torch.nn.Linear))


@pytest.mark.parametrize("trained_bias", [False, True])
def test_a_frozen_weight_passes_the_input_gradient_like_torch(trained_bias):
    """LoRA's base layers: the weight is frozen, the gradient flows to the input (and a trained bias)."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40)
    layer.weight.requires_grad_(False)
    layer.bias.requires_grad_(trained_bias)
    x = torch.randn(2, 35, 24, requires_grad=True)  # 70 rows: run at 72, forward and backward
    target = torch.randn(2, 35, 40)
    (F.linear(x, layer.weight, layer.bias) * target).sum().backward()
    want_x, want_bias = x.grad.clone(), layer.bias.grad
    x.grad, layer.bias.grad = None, None
    with _installed(layer) as packed:
        (layer(x) * target).sum().backward()
    assert packed.calls == 2  # the forward and the input gradient
    assert _close(x.grad, want_x)
    assert (layer.bias.grad is None) == (not trained_bias)
    if trained_bias:
        assert _close(layer.bias.grad, want_bias)


def test_a_weight_that_would_crowd_memory_keeps_torch_path(monkeypatch):

    layer = torch.nn.Linear(16, 8)
    layer.weight.requires_grad_(False)
    x = torch.randn(3, 16, requires_grad=True)
    assert packed_linears.available_memory() > 0 and packed_linears.memory_floor() >= packed_linears.MIN_FREE_MEMORY
    monkeypatch.setattr(packed_linears, "memory_floor", lambda: 3 << 30)
    monkeypatch.setattr(packed_linears, "available_memory", lambda: (3 << 30) + layer.weight.nbytes - 1)
    with _installed(layer) as packed:
        out = layer(x)
        out.sum().backward()
    assert packed.calls == 0 and packed.packs == 0 and packed.skipped == 2  # the weight and its transpose
    assert torch.equal(out, F.linear(x, layer.weight, layer.bias))
    assert torch.allclose(x.grad, layer.weight.sum(0).expand(3, 16))


def test_row_counts_are_padded_to_a_bounded_set():
    """Up to 32 rows exact, then at most 1/8 padding: 88 row counts up to 4,096 rows, 112 up to 32,768."""
    padded = {rows: packed_linears.padded_rows(rows) for rows in range(1, 32_769)}
    assert all(rows <= out <= rows * 9 / 8 for rows, out in padded.items())
    assert [padded[rows] for rows in (1, 32, 33, 36, 37, 64, 65, 699, 4096)] == [1, 32, 36, 36, 40, 64, 72, 704, 4096]
    assert len({padded[rows] for rows in range(1, 4097)}) == 88 and len(set(padded.values())) == 112
    assert all(padded[out] == out for out in padded.values())  # a padded count is its own bucket


def _resident_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def test_many_row_counts_keep_memory_bounded():
    """oneDNN keeps ~0.5 MB for every row count a packed weight ran at, for good: 400 row counts of one weight
    took ~260 MB before the padding, ~30 MB with it (the 61 padded counts). A run's prefill chunks and batches
    bring new row counts every step, so this is what kept a long run's memory growing."""
    layer = torch.nn.Linear(256, 512).requires_grad_(False)
    with torch.no_grad(), _installed(layer) as packed:
        layer(torch.randn(8, 256))
        before = _resident_mb()
        for rows in range(1, 401):
            layer(torch.randn(rows, 256))
        grown = _resident_mb() - before
    assert packed.calls == 401 and grown < 100, f"{grown:.0f} MB"

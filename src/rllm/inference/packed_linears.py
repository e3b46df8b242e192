"""fp32 linear layers on a CPU through oneDNN, each weight packed once, where that is faster on this machine.

torch runs an fp32 `F.linear` on a CPU as an MKL sgemm. On the 2-core AMD EPYC this project is measured on, that ran
the model's linear shapes at 180-220 GFLOP/s; oneDNN, with the weight reordered once into its blocked layout, ran
them at 450-500 (and MKL's own packed-weight API was no faster than plain MKL, so the gain is oneDNN's kernels).
SmolLM2-135M's shapes, `torch.ops.mkldnn._linear_pointwise` against `F.linear`:

| rows | MLP 1536 x 576 | output layer 49,152 x 576 |
|---|---|---|
| 32 (a decode step) | 0.37 -> 0.16 ms (2.3x) | 20.9 -> 5.8 ms (3.6x) |
| 1,536 (a prefill) | 12.8 -> 5.6 ms (2.3x) | - |

That gain is not every CPU's: on a 2-core Intel Xeon (avx512, AMX) MKL ran the same shapes about as fast, and a
packed copy costs the weight's size again in memory. So `PackedLinears.install` chooses, per weight shape and for
decode and prefill row counts, between packed oneDNN and torch's default by timing both on this machine once
(`rllm.inference.kernels`: the rules, the cache in `$RLLM_HOME/kernels.json`), and packs only the shapes that chose
packing.

`PackedLinears.install(model)` routes the model's `nn.Linear` modules (peft's LoRA layers included: their base and
adapter layers are `nn.Linear`s) through `linear`, which runs packed only on a thread inside `with packed_linears:`
and is plain `F.linear` everywhere else, so another thread using the same module (an asynchronous trainer) keeps
torch's path. A copy or a pickle of a routed module gets torch's plain forward. (A `TorchFunctionMode` would need no
routing, but it intercepts every torch call of the forward: 10 ms of a 40 ms decode step at 32 rows.) Choices:
- A packed copy is keyed by the weight object, its version counter and its storage, so any change of the weight (an
  optimizer step, `LocalModel.update_weights`, `param.data = ...`) repacks it at its next use. LoRA's frozen base
  weights are packed once.
- The copies cost the model's fp32 size again in memory (twice for a trainer's frozen LoRA base, whose backward
  uses a transposed copy); a copy goes when its weight is freed, or with `clear()`. A weight whose copy would leave
  less than a quarter of the machine's (or the container's) memory available, and at least 2 GiB, is not packed
  and keeps torch's path: the copies never take the room the run needs later.
- The results are the same dot products summed in another order: logits move by float rounding (about 1e-6
  relative), so log-probabilities against a plain fp32 forward move by ~1e-5 and seeded samples match torch's path
  except where a draw falls within that rounding of a token boundary.
- Only what oneDNN packs is taken: fp32 input and 2-D weight on the CPU, and no gradient for the weight. A frozen
  weight under autograd (LoRA's base layers in training) runs a packed autograd function whose backward, the
  input's gradient, is a packed linear with the transposed weight. Anything else, or a torch build without
  oneDNN, runs `F.linear` unchanged.
- It runs only where `rllm.runtime` enables `packed_linears` (`rllm train`, `eval` and `serve` do, from the
  config's `runtime.packed_linears`): a library user's models keep torch's path unless the program opts in. A
  `LocalModel` packs its linears where that switch AND its own `InferenceOptions.packed_linears` (default on,
  the config's `inference.packed_linears`) say so: the first is the process's consent to private ops, the second
  the model's choice.
- oneDNN keeps state for every row count it ran a packed weight at, never released, so a packed linear runs at
  `padded_rows(rows)` rows (exact to 32, then at most 1/8 padding): a bounded set of row counts, and a long run's
  memory stays flat (it grew with every step's new prefill and batch sizes before: issue 53).
- The two private oneDNN ops it relies on are called in one function each, `_onednn_pack` and `_onednn_linear`; a
  unit test fails on a torch whose ops no longer behave as used here.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rllm import runtime
from rllm.inference.kernels import (
    DEFAULT,
    MAX_ROUNDS,
    PACKED,
    ROUNDS,
    ROUNDS_BUDGET_S,
    TIMED_DIM,
    KernelChoice,
    LinearShape,
)

__all__ = [
    "PackedLinears",
    "available_memory",
    "linear",
    "memory_floor",
    "packed_linears_active",
    "packed_linears_available",
    "padded_rows",
    "runs_packed",
    "time_paths",
]

_thread = threading.local()  # .packer: the PackedLinears active on this thread
MIN_FREE_MEMORY = 2 << 30  # the least a new packed copy must leave available (see `memory_floor`)


def packed_linears_available() -> bool:
    """`rllm.runtime` enables packed linears and this torch build can pack linear weights with oneDNN."""
    return runtime.options().packed_linears and _onednn_packs()


def packed_linears_active() -> bool:
    """A `PackedLinears` is active on this thread."""
    return getattr(_thread, "packer", None) is not None


def runs_packed(x: Tensor, weight: Tensor) -> bool:
    """`linear(x, weight)` would run packed here: a `PackedLinears` is active on this thread and chose packing for
    this shape at `x`'s row count (the output layer takes torch's sliced path otherwise, `rllm.inference.lm_head`)."""
    packer = getattr(_thread, "packer", None)
    rows = x.numel() // max(x.shape[-1], 1)
    return packer is not None and packer.kernels.path(LinearShape(*weight.shape), rows) == PACKED


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear`, packed when a `PackedLinears` is active on this thread and the call is one oneDNN packs: outside
    autograd, or with a frozen weight (LoRA's base layers: the gradient flows to the input only)."""
    packer = getattr(_thread, "packer", None)
    if packer is None or not _packable(x, weight, bias):
        return F.linear(x, weight, bias)
    if not torch.is_grad_enabled() or not (x.requires_grad or (bias is not None and bias.requires_grad)):
        return packer.run(x, weight, bias)
    if not packer.packs_forward_or_backward(weight, x.numel() // x.shape[-1]):
        return F.linear(x, weight, bias)  # torch's autograd both ways: the same results, no Python backward
    return _FrozenWeightLinear.apply(x, weight, bias, packer)


class PackedLinears:
    """Packed weights, and the switch that makes `linear` use them on the entering thread. See the module
    docstring."""

    def __init__(self, kernels: KernelChoice | None = None) -> None:
        """`kernels`: which path each shape runs; measured on this machine (or read from the cache) when None."""
        self.kernels = kernels if kernels is not None else KernelChoice(timer=time_paths)
        self._packed: dict[tuple[int, bool], tuple[weakref.ref, tuple[int, int], Tensor]] = {}
        self.calls = 0  # linears that ran packed (tests and benchmarks read it)
        self.packs = 0  # weights packed, repacks included
        self.skipped = 0  # weights left unpacked for want of memory

    def install(self, model: nn.Module) -> int:
        """Route `model`'s `nn.Linear` modules through `linear`; returns how many (already routed ones count too).
        The routing is per module instance, does nothing unless a `PackedLinears` is active on the calling thread,
        and is not kept by a copy or a pickle (`torch.save`): those hold plain `nn.Linear` forwards, loadable
        without rllm."""
        routed, shapes = 0, set()
        for module in model.modules():
            if isinstance(module, nn.Linear):
                own = vars(module).get("forward")
                plain = own is None or (isinstance(own, functools.partial) and own.func is nn.Linear.forward)
                if type(module).forward is nn.Linear.forward and plain:  # a subclass's or a user's forward: left
                    module.forward = _RoutedForward(module)
                if isinstance(vars(module).get("forward"), _RoutedForward):
                    routed += 1
                    shapes.update(_shapes_of(module.weight))
        self.kernels.add(shapes)  # chosen now, at load, rather than inside the first forward
        return routed

    def __enter__(self) -> PackedLinears:
        active = getattr(_thread, "packer", None)
        if active is not None and active is not self:
            raise RuntimeError("another PackedLinears is already active on this thread")
        _thread.packer, _thread.depth = self, getattr(_thread, "depth", 0) + 1  # re-entrant: nested calls
        return self

    def __exit__(self, *exc: Any) -> None:
        _thread.depth -= 1
        if not _thread.depth:
            _thread.packer = None

    @staticmethod
    @contextlib.contextmanager
    def suspended() -> Iterator[None]:
        """No `PackedLinears` active on this thread inside (the one that was, active again after): a function a
        `LocalModel` worker runs for its caller (`call_on_worker`) enters its own."""
        saved = getattr(_thread, "packer", None), getattr(_thread, "depth", 0)
        _thread.packer, _thread.depth = None, 0
        try:
            yield
        finally:
            _thread.packer, _thread.depth = saved

    def packs_forward_or_backward(self, weight: Tensor, rows: int) -> bool:
        """A frozen `weight`'s linear at `rows` rows runs packed forward, or its input gradient backward."""
        shapes = (LinearShape(*weight.shape), LinearShape(*weight.shape, transposed=True))
        return any(self.kernels.path(shape, rows) == PACKED for shape in shapes)

    def run(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        if self.kernels.path(LinearShape(*weight.shape), x.numel() // x.shape[-1]) != PACKED:
            return F.linear(x, weight, bias)
        packed = self._weight(weight)
        if packed is None:
            return F.linear(x, weight, bias)
        self.calls += 1
        return _rows_padded_linear(x, packed, bias)

    def run_transposed(self, grad: Tensor, weight: Tensor) -> Tensor:
        """`grad @ weight`: the input's gradient of a linear layer, as a packed linear with `weight.T`."""
        if self.kernels.path(LinearShape(*weight.shape, transposed=True), grad.numel() // grad.shape[-1]) != PACKED:
            return grad @ weight
        packed = self._weight(weight, transposed=True)
        if packed is None:
            return grad @ weight
        self.calls += 1
        return _rows_padded_linear(grad, packed)

    def clear(self) -> None:
        """Drop every packed copy (their memory with them)."""
        self._packed.clear()

    def _weight(self, weight: Tensor, *, transposed: bool = False) -> Tensor | None:
        """The packed copy of `weight` (or of its transpose), packed now if missing or stale; None when packing
        it would leave less than `memory_floor()` available (torch's path then runs)."""
        key, state = (id(weight), transposed), (weight._version, weight.data_ptr())
        entry = self._packed.get(key)
        if entry is not None and entry[0]() is weight and entry[1] == state:
            return entry[2]
        if entry is None and available_memory() - weight.nbytes < memory_floor():
            self.skipped += 1
            return None
        source = weight.detach().t().contiguous() if transposed else weight.detach()
        packed = _onednn_pack(source)
        forget = self._packed.pop
        self._packed[key] = (weakref.ref(weight, lambda _, key=key: forget(key, None)), state, packed)
        self.packs += 1
        return packed


class _FrozenWeightLinear(torch.autograd.Function):
    """A packed linear whose weight takes no gradient: the backward is `grad @ weight` (packed too) and, for a
    trained bias, the gradient summed over the rows."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, packer: PackedLinears) -> Tensor:
        ctx.weight, ctx.packer = weight, packer
        return packer.run(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, Tensor | None, None]:
        grad = grad.contiguous()
        grad_x = ctx.packer.run_transposed(grad, ctx.weight) if ctx.needs_input_grad[0] else None
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.needs_input_grad[2] else None
        return grad_x, None, grad_bias, None


class _RoutedForward:
    """A routed `nn.Linear`'s forward (an instance attribute). A copy or a pickle of the module gets torch's plain
    forward instead, as `functools.partial(nn.Linear.forward, module)`, so nothing saved depends on rllm."""

    def __init__(self, module: nn.Linear) -> None:
        self.module = module

    def __call__(self, input: Tensor) -> Tensor:
        return linear(input, self.module.weight, self.module.bias)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return functools.partial, (nn.Linear.forward, self.module)


def _shapes_of(weight: Tensor) -> list[LinearShape]:
    """The shapes a routed weight runs as: its own and, frozen (LoRA's base), its input gradient's."""
    if weight.dtype != torch.float32 or weight.dim() != 2:
        return []
    shape = LinearShape(*weight.shape)
    return [shape] if weight.requires_grad else [shape, LinearShape(*weight.shape, transposed=True)]


def time_paths(shape: LinearShape, rows: int) -> dict[str, float]:
    """The least time of `ROUNDS` to `MAX_ROUNDS` runs (more while they take under `ROUNDS_BUDGET_S`) of one linear
    of `shape` at `rows` rows on each path, the paths interleaved
    (`rllm.inference.kernels`' real timer). Random weights from a private generator: the program's RNG is untouched.
    A dimension over `TIMED_DIM` is timed on a slice of it. Timed on one thread (restored after): beside other busy
    processes a multi-threaded kernel's time is its threads' waits for each other (a 0.06 ms linear took 4-16 ms on
    2 threads of a loaded 2-core Xeon, 0.06 ms on one), and both paths split a linear's rows between threads alike."""
    out_features, in_features = min(shape.out_features, TIMED_DIM), min(shape.in_features, TIMED_DIM)
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=generator)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _least_times(shape, rows, weight, generator)
    finally:
        torch.set_num_threads(threads)


def _least_times(shape: LinearShape, rows: int, weight: Tensor, generator: torch.Generator) -> dict[str, float]:
    out_features, in_features = weight.shape
    with torch.no_grad():
        if shape.transposed:  # the input gradient: grad [rows, out] @ weight [out, in]
            x = torch.randn(rows, out_features, generator=generator)
            packed = _onednn_pack(weight.t().contiguous())
            runs = {DEFAULT: lambda: x @ weight, PACKED: lambda: _onednn_linear(x, packed)}
        else:
            x = torch.randn(rows, in_features, generator=generator)
            packed = _onednn_pack(weight)
            runs = {DEFAULT: lambda: F.linear(x, weight), PACKED: lambda: _onednn_linear(x, packed)}
        best = dict.fromkeys(runs, float("inf"))
        for run in runs.values():  # a first run pays for oneDNN's primitive and MKL's buffers
            run()
        began = time.perf_counter()
        for round_ in range(MAX_ROUNDS):
            if round_ >= ROUNDS and time.perf_counter() - began > ROUNDS_BUDGET_S:
                break  # a large shape: its ROUNDS rounds are enough; a small one takes more against the noise
            for path, run in runs.items():
                start = time.perf_counter()
                run()
                best[path] = min(best[path], time.perf_counter() - start)
    return best


def padded_rows(rows: int) -> int:
    """The row count a packed linear of `rows` rows runs at: `rows` up to 32 (decode batches), above that rounded
    up to one of 8 steps an octave (36, 40, ..., 64, 72, ..., 128, 144, ...), so at most 1/8 of the rows are
    padding. Why: oneDNN keeps state for every row count it has run a packed weight at, for good (measured: about
    0.5-0.65 MB per row count and weight shape, never released, whatever ONEDNN_PRIMITIVE_CACHE_CAPACITY says), and a
    run's prefill chunks and training batches bring new row counts every step: a 36-step full fine-tuning run of
    SmolLM2-135M grew its resident floor 50-130 MB and kept growing. Rounded, the row counts are bounded: 32 + 8
    an octave, 88 up to 4,096 rows."""
    if rows <= 32:
        return rows
    step = 1 << (rows.bit_length() - 4)
    return -(-rows // step) * step


def _rows_padded_linear(x: Tensor, packed: Tensor, bias: Tensor | None = None) -> Tensor:
    """`_onednn_linear` run at `padded_rows` rows: `x`'s rows padded with zeros, the padding's outputs dropped."""
    rows = x.numel() // x.shape[-1]
    padded = padded_rows(rows)
    if padded == rows:
        return _onednn_linear(x, packed, bias)
    flat = F.pad(x.reshape(rows, x.shape[-1]), (0, 0, 0, padded - rows))
    out = _onednn_linear(flat, packed, bias)[:rows]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _packable(x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or weight.dim() != 2 or x.dim() < 2:
        return False
    if x.device.type != "cpu" or weight.device.type != "cpu" or weight.layout != torch.strided or x.is_mkldnn:
        return False
    if weight.is_inference():  # no version counter to notice changes by
        return False
    if bias is not None and (bias.dtype != torch.float32 or bias.device.type != "cpu"):
        return False
    return not (torch.is_grad_enabled() and weight.requires_grad)  # a trained weight's gradient: torch's path


def available_memory() -> int:
    """Bytes this process can still take: Linux's MemAvailable, lowered to what the cgroup's memory limit leaves (a
    container's); unbounded where neither can be read."""
    return _memory()[0]


def memory_floor() -> int:
    """What a new packed copy must leave available: a quarter of the machine's memory (or of the container's limit),
    at least 2 GiB, so the copies never take the room a run's activations, optimizer and K/V need later."""
    return max(MIN_FREE_MEMORY, _memory()[1] // 4)


def _memory() -> tuple[int, int]:
    """(available, total) bytes, see `available_memory`."""
    fields = {}
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                name, _, rest = line.partition(":")
                fields[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    available, total = fields.get("MemAvailable", 1 << 62), fields.get("MemTotal", 1 << 62)
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit, usage = (Path(path).read_text().strip() for path in (limit_file, usage_file))
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit():
            available, total = min(available, int(limit) - int(usage)), min(total, int(limit))
        break
    return available, total


@functools.cache
def _onednn_packs() -> bool:
    """One tiny packed linear runs and matches `F.linear` (builds without oneDNN, or other CPUs, may lack it)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        x, weight = torch.ones(2, 4), torch.arange(12.0).reshape(3, 4)
        out = _onednn_linear(x, _onednn_pack(weight))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return bool(torch.allclose(out, F.linear(x, weight)))


def _onednn_pack(weight: Tensor) -> Tensor:
    """`weight` ([out, in], fp32) reordered into oneDNN's blocked layout: the private op
    `torch.ops.mkldnn._reorder_linear_weight` (no batch size hint)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, None)


def _onednn_linear(x: Tensor, packed: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear(x, weight, bias)` from `_onednn_pack(weight)`: the private op `torch.ops.mkldnn._linear_pointwise`
    with no fused post-op ("none", no scalars, no algorithm)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

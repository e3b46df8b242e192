"""CUDA graphs of `LocalModel`'s decode step: one kernel launch per step instead of thousands.

An eager decode step of a 24-layer model dispatches ~1,500 operators, each a kernel launch of a few microseconds of
host time, while the GPU work of a step at 64 rows is well under a millisecond: the step is bound by the host. A CUDA
graph records the step's kernels once and replays them with one launch (the same idea as vLLM's and SGLang's
captured decode batches).

A graph replays the same kernels on the same memory, so the step it captures (`BatchScheduler._decode`) reads and
writes only fixed tensors (the K/V buffers, the row state, the weights) and its shapes are fixed: it is captured per
key (rows bucket, attention span bucket, sampling mode), padding the running rows up to the bucket with inactive
rows and the span up to a multiple of `SPAN_STEP` (masked positions cost a little attention, nothing else).
- The first step at a key runs eagerly at the padded shape (the warm-up: lazy library initialisation happens
  outside a capture); the second captures and replays. All graphs share one memory pool (they never run at once
  and none keeps an output of its own: results go to the row state's fixed `out`).
- A graph holds addresses: when the K/V buffers or the row state are reallocated (`generation`), or a weight
  tensor was replaced rather than updated in place (checked at each admission), every graph is dropped and
  recaptured on demand. Weights changed in place (the optimizer's step, `update_weights`) need nothing.
- Row counts past the largest bucket run eagerly. A capture that fails (a model doing something graphs cannot
  hold) turns graphs off for this model with one warning, and steps run eagerly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["SPAN_STEP", "DecodeGraphs", "row_buckets"]

logger = logging.getLogger(__name__)

SPAN_STEP = 256  # attention spans are rounded up to a multiple of this


def row_buckets(max_rows: int) -> list[int]:
    """Batch sizes a graph is captured for: 1, 2, 4, 8, then every 8 to 64, every 16 to 256, every 32 after (as
    vLLM's capture sizes), and `max_rows` itself."""
    sizes = [1, 2, 4, *range(8, 65, 8), *range(80, 257, 16), *range(288, max_rows + 32, 32)]
    return sorted({size for size in sizes if size < max_rows} | {max_rows})


class DecodeGraphs:
    """The captured decode steps of one scheduler; see the module docstring."""

    def __init__(self, max_rows: int, capture: Callable[[Callable[[], None]], Any] | None = None) -> None:
        """`capture(step)` records `step` and returns an object whose `replay()` runs it again (default: a CUDA
        graph; tests pass one that reruns the step on a CPU)."""
        self.buckets = row_buckets(max_rows)
        self.capture = capture or self._capture_cuda_graph
        self.graphs: dict[tuple, Any] = {}
        self.warmed: set[tuple] = set()
        self.pool: Any = None
        self.generation: tuple | None = None
        self.disabled = False
        self._weights: tuple[int, ...] = ()

    def shape(self, rows: int, span: int, capacity: int) -> tuple[int, int] | None:
        """(rows bucket, span bucket) for a step, or None when it runs eagerly."""
        bucket = next((b for b in self.buckets if b >= rows), None)
        if bucket is None:
            return None
        return bucket, min(-(-span // SPAN_STEP) * SPAN_STEP, capacity)

    def check_weights(self, model: torch.nn.Module) -> None:
        """Drop every graph if a weight tensor of `model` now lives at another address."""
        addresses = tuple(p.data_ptr() for p in model.parameters())
        if addresses != self._weights:
            self._weights = addresses
            self.reset()

    def reset(self) -> None:
        """Drop every graph and their memory pool. The pool must go with them: once its last graph is freed the
        allocator counts no user of it, and a capture that named it again would fail on torch's internal assert
        (`use_count > 0`), leaving the CUDA generator mid-capture for the whole process."""
        self.graphs.clear()
        self.warmed.clear()
        self.pool = None

    def run(
        self, rows: int, span: int, mode: int, capacity: int, generation: tuple, body: Callable[[int, int, Any], None]
    ) -> bool:
        """Run `body(rows, span, mode)` padded to its bucket, from a graph when one is captured; False when the step
        must run eagerly at its own shape instead (nothing was run)."""
        if self.disabled:
            return False
        if generation != self.generation:
            self.generation = generation
            self.reset()
        shape = self.shape(rows, span, capacity)
        if shape is None:
            return False
        key = (*shape, int(mode))
        graph = self.graphs.get(key)
        if graph is not None:
            graph.replay()
            return True
        if key not in self.warmed:
            self.warmed.add(key)
            body(shape[0], shape[1], mode)
            return True
        try:
            graph = self.graphs[key] = self.capture(lambda: body(shape[0], shape[1], mode))
        except Exception as exc:  # any capture failure means: run this model eagerly
            logger.warning("LocalModel: CUDA graph capture failed (%s); decoding eagerly from now on", exc)
            self.disabled = True
            self.reset()
            return False
        graph.replay()
        return True

    def _capture_cuda_graph(self, step: Callable[[], None]) -> Any:
        graph = torch.cuda.CUDAGraph()
        # thread_local: the trainer may use the GPU from another thread meanwhile (asynchronous training)
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            step()
        if self.pool is None:
            self.pool = graph.pool()
        return graph

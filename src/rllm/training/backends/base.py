"""What every training backend offers the trainer, and the pieces the backends share.

`AgentTrainer` talks to a backend only through `TrainingBackend`; it never knows whether the update runs in its own
process (`TorchBackend`) or on verl's FSDP workers on a Ray cluster (`VerlBackend`). Both compute the same loss
(`rllm.training.losses.actor_loss`) over the same mini-batches (`mini_batch_order`) with the same LR schedule.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from rllm.inference.options import InferenceOptions
from rllm.training.batch import TrainingRow

__all__ = ["TrainingBackend", "UpdateLog", "mini_batch_order", "push_weights_to", "split_contiguous"]


@runtime_checkable
class TrainingBackend(Protocol):
    """Rows in; log-probs, reference log-probs and update metrics out; save, load and push weights.

    - `compute_logprobs(rows, temperature=, reference=)`: token-aligned per-row log-probs (entry t: log p(token t |
      tokens < t), 0.0 off the loss mask), under the current weights or the KL reference.
    - `update(rows, temperature=, norm_length=)`: one PPO update (epochs x mini-batches x micro-batches); metrics.
    - `make_rollout_model(options)` / `push_weights(client)`: a `LocalModel` to roll out with, and making any rollout
      client sample from the newest weights (returns its weight version).
    - `save(directory)` / `load(directory)`: everything a resumed run needs that the base weights do not hold.
    - `close()`: release workers and processes (idempotent).
    """

    tokenizer: Any
    weight_version: int

    def compute_logprobs(
        self, rows: list[TrainingRow], *, temperature: float, reference: bool = False
    ) -> list[list[float]]: ...

    def update(
        self, rows: list[TrainingRow], *, temperature: float, norm_length: int | None = None
    ) -> dict[str, float]: ...

    def make_rollout_model(self, options: InferenceOptions | None = None) -> Any: ...

    def push_weights(self, client: Any) -> int: ...

    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...

    def close(self) -> None: ...


def mini_batch_order(n_rows: int, *, epochs: int, mini_batches: int, generator: torch.Generator) -> list[list[int]]:
    """The mini-batches of one update, in order: each epoch a seeded shuffle of the rows, cut into `mini_batches`
    contiguous parts. The generator is part of the backend's checkpoint, so a resumed run shuffles identically."""
    plan = []
    for _epoch in range(epochs):
        order = torch.randperm(n_rows, generator=generator).tolist()
        plan.extend(split_contiguous(order, mini_batches))
    return plan


def split_contiguous(order: list[int], parts: int) -> list[list[int]]:
    """`order` in `parts` contiguous chunks of near-equal size (the first ones one longer); empty ones dropped."""
    size, extra = divmod(len(order), parts)
    chunks, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        chunks.append(order[start:end])
        start = end
    return [chunk for chunk in chunks if chunk]


class UpdateLog:
    """An update's metrics: weighted parts summed per optimizer step, then averaged over the steps; counts
    (`train_tokens`, `loss_tokens`, `skipped_nonfinite`: optimizer steps skipped for a non-finite loss or gradient,
    `off_policy/nonfinite_tokens`: sampled tokens whose recorded log-prob is not finite, masked out of the loss)
    summed over the whole update."""

    _COUNTS = ("train_tokens", "loss_tokens", "skipped_nonfinite", "off_policy/nonfinite_tokens")

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.steps = 0

    def add(self, values: dict[str, float], weight: float = 1.0) -> None:
        for key, value in values.items():
            self.totals[key] += value * weight

    def count_tokens(self, attention_tokens: float, loss_tokens: float) -> None:
        self.totals["train_tokens"] += attention_tokens
        self.totals["loss_tokens"] += loss_tokens

    def metrics(self, elapsed: float) -> dict[str, float]:
        self.totals["skipped_nonfinite"] += 0  # always reported
        out = {k: v if k in self._COUNTS else v / max(self.steps, 1) for k, v in self.totals.items()}
        out.update(train_time_s=elapsed, train_tokens_per_s=self.totals["train_tokens"] / max(elapsed, 1e-9))
        return out


def push_weights_to(client: Any, backend: Any) -> int:
    """Make `client` sample from `backend.model`'s current weights; returns the client's new weight version.
    A server-backed client (`sync_weights`, e.g. vLLM) gets the backend as a weight source
    (`rllm.training.backends.serving`), pulls what its sync strategy needs and is stamped `backend.weight_version
    + 1`; a LocalModel sharing the backend's model object already computes with them (only its version is bumped,
    between two decode steps); any other client with `update_weights` receives `backend.rollout_state_dict()`."""
    if hasattr(client, "sync_weights"):
        from rllm.training.backends.serving import TorchWeightSource

        return int(client.sync_weights(TorchWeightSource(backend), backend.weight_version + 1))
    if getattr(client, "model", None) is backend.model:
        return int(client.update_weights({}))
    return int(client.update_weights(backend.rollout_state_dict()))

"""Counting the torch operators a decode step dispatches: `LocalModel`'s against transformers `generate`'s.

On a GPU every dispatched operator is at least one kernel launch (a few microseconds of host time each), so a decode
step's operator count is what bounds it when it runs eagerly; a count that grows with the number of rows would make
large batches host-bound. `TorchDispatchMode` sees every operator below autograd on any device, so the count is
measured on a CPU and holds for a GPU (where the step is then also captured in a CUDA graph).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpCounter", "decode_step_ops", "generate_step_ops"]


class OpCounter(TorchDispatchMode):
    """Counts the operators dispatched while active (`total`, and `by_name`)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_name.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.by_name[str(func)] += 1
        return func(*args, **(kwargs or {}))


def decode_step_ops(local: Any, prompts: list[list[int]], *, new_tokens: int = 6) -> list[int]:
    """Operators of each decode step of `local` (a `LocalModel`) that ran with every prompt's row in the batch,
    generating `new_tokens` tokens for each prompt sampled at temperature 1 (no EOS: give the model
    `eos_token_ids=()`)."""
    from rllm.models.base import SamplingParams

    scheduler = local._scheduler
    counts: list[int] = []
    decode = scheduler._decode

    def counted(count: int, span: int, mode: Any) -> None:
        if count < len(prompts):  # still admitting, or rows finishing: not a full step
            decode(count, span, mode)
            return
        with OpCounter() as counter:
            decode(count, span, mode)
        counts.append(counter.total)

    scheduler._decode = counted
    try:
        sampling = SamplingParams(temperature=1.0, max_tokens=new_tokens)

        async def run() -> None:
            await asyncio.gather(*[local.generate(p, sampling) for p in prompts])

        asyncio.run(run())
    finally:
        scheduler._decode = decode
    return counts


def generate_step_ops(model: Any, pad_id: int, prompts: list[list[int]], *, new_tokens: int = 6) -> float:
    """Operators per decode step of transformers `generate` on the same left-padded batch, sampling at temperature 1:
    the count for `new_tokens` tokens minus the count for 2, per extra step (so prefill and setup cancel out)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)

    def count(tokens: int) -> int:
        with torch.inference_mode(), OpCounter() as counter:
            model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                pad_token_id=pad_id,
            )
        return counter.total

    return (count(new_tokens) - count(2)) / (new_tokens - 2)

"""`InferenceOptions`: every setting of one `LocalModel`, in one frozen object.

Rollouts (`rllm train`), `rllm eval` and the gateway (`rllm serve --embedded`) build theirs with
`config.py:inference_options` from the config's `inference:` section, so the three run the same engine the same way.
A library user passes one to `LocalModel(model, tokenizer, InferenceOptions(...))`; the defaults are those of the
releases before it.

These settings belong to one model, not to the process: two models in one program may differ (an eager and a
graphed one, one with a prefix cache and one without). So `cuda_graphs` and the prefix cache live here, not in
`rllm.runtime`. Packed linears are both: `packed_linears=True` here asks for them, and they run only where the
program also opted in to the process-wide `rllm.runtime` switch of the same name (they call private torch ops), on
an fp32 model on a CPU, with a torch that supports them (`packed_linears.py:packed_linears_available`).

No torch here: the config imports this module, and `import rllm.config` stays light.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

__all__ = ["DEFAULT_PREFIX_CACHE_TOKENS", "InferenceOptions"]

# the prefix store's bound: enough K/V for a few hundred multi-turn prompts of a small model, a few hundred MB
DEFAULT_PREFIX_CACHE_TOKENS = 65536


@dataclasses.dataclass(frozen=True)
class InferenceOptions:
    """How a `LocalModel` runs (see `rllm.inference.model`'s docstring for what each one does).

    - `max_batch_size`: rows decoded together; more requests wait in the queue.
    - `seed`: derives the seed of a request that brings none (with a counter of submitted requests).
    - `device`, `dtype` (e.g. "bfloat16"): where and in what the model runs; a dtype other than the model's makes
      the LocalModel keep its own converted copy. None: as the model is.
    - `eos_token_ids`: the stop tokens (None: the tokenizer's EOS and the generation config's; `()`: never stop on
      a token, for benchmarks).
    - `num_threads`: torch's intra-op threads on the worker (None: chosen by `rllm.cpus`, see the model's docs).
    - `prefix_cache_tokens`: the bound of the K/V kept from finished sequences for prompts that share a prefix;
      0 turns the store off.
    - `cuda_graphs`: on a CUDA device, replay decode steps from CUDA graphs; False runs them eagerly.
    - `packed_linears`: run fp32 CPU linear layers through oneDNN with packed weights, where `rllm.runtime` also
      enables them (module docstring), each shape where that measured faster on this CPU (`rllm.inference.kernels`).
    """

    max_batch_size: int = 32
    seed: int = 0
    device: Any = None
    dtype: Any = None
    eos_token_ids: tuple[int, ...] | None = None
    num_threads: int | None = None
    prefix_cache_tokens: int = DEFAULT_PREFIX_CACHE_TOKENS
    cuda_graphs: bool = True
    packed_linears: bool = True

    def __post_init__(self) -> None:
        _check_int("max_batch_size", self.max_batch_size, minimum=1)
        _check_int("seed", self.seed)
        _check_int("prefix_cache_tokens", self.prefix_cache_tokens, minimum=0)
        if self.num_threads is not None:
            _check_int("num_threads", self.num_threads, minimum=1)
        for name in ("cuda_graphs", "packed_linears"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"InferenceOptions.{name} must be True or False, got {getattr(self, name)!r}")
        if self.eos_token_ids is not None:
            # any iterable of ids is accepted and kept as a tuple, so the options stay hashable and unchanged
            object.__setattr__(self, "eos_token_ids", _token_ids(self.eos_token_ids))


def _check_int(name: str, value: Any, *, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"InferenceOptions.{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"InferenceOptions.{name} must be >= {minimum}, got {value}")


def _token_ids(ids: Iterable[int]) -> tuple[int, ...]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"InferenceOptions.eos_token_ids must be token ids (e.g. (2,) or ()), got {ids!r}")
    found = tuple(ids)
    for token in found:
        _check_int("eos_token_ids", token, minimum=0)
    return found

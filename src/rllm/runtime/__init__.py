"""Process-wide tuning, off unless the program opts in: one options object and one switch.

rllm's speed on a shared CPU comes partly from changing state that every thread of the process shares: the garbage
collector, torch's intra-op thread count, the event loop's task factory, and private torch and transformers APIs
that an upgrade may break. A library must not do that behind its user's back, so none of it happens until the
program says so:

    import rllm.runtime
    rllm.runtime.enable()                      # every tuning below (what `rllm train`, `eval` and `serve` do)
    rllm.runtime.enable(rllm.runtime.RuntimeOptions(packed_linears=False))   # all but one

`rllm train`, `rllm eval`, `rllm serve` (and `rllm sft`, `rllm dpo`, `rllm rft`) enable it from the config's `runtime:`
section, every tuning on by default, so their numbers are those of the releases before this switch. Without
`enable()`, importing rllm and running an engine or a `LocalModel` leaves the collector, torch's threads,
`nn.Linear` and the event loop as they were, during the calls as well as after them (a test holds it).

What each field turns on, where it is applied, and what not enabling it costs (measured on this project's 2-core
AMD EPYC; docs/training/speed.md has the details):

- `gc_tuning`: during an engine call (`rllm.engine.workflow_engine`) the objects that existed before it are frozen
  (`gc.freeze`) and the youngest generation is collected after 10,000 new objects instead of 700; both are put back
  when the last running call ends. Without it a full collection walks every long-lived object (115-150 ms with a
  tokenizer loaded, every rollout stalled).
- `eager_request_writes`: on Python 3.11, `OpenAIClient` sets a task factory on its event loop that writes request
  bodies at once, as aiohttp does from 3.12 (`rllm.models.eager_writes`); 7-10 ms a step at 64 rollouts without it.
- `packed_linears`: `LocalModel` and the torch backend run fp32 CPU linear layers through oneDNN with packed
  weights (`rllm.inference.packed_linears`, private `torch.ops.mkldnn` ops), each shape where that measured faster
  on this CPU (`rllm.inference.kernels`); `make demo` took 0.56-0.63x as long with them on an AMD EPYC. A model
  runs them where this switch AND its own `InferenceOptions.packed_linears` (default on) say so.
- `thread_governor`: before each decode step and micro-batch, torch's intra-op threads on the computing thread
  follow the cores other processes leave free (`rllm.cpus.ThreadGovernor`); without it torch keeps its own count,
  which on a busy machine ran generation and an update 1.2-2.5x as long.
- `fixed_training_threads`: a training run (`AgentTrainer`: `rllm train`, `sft`, `dpo`) picks torch's intra-op
  thread count once, records it in its run directory and holds it for the whole run, `--resume` included, instead
  of following the load (`rllm.training.numerics`): its results then do not depend on the machine's load, and a
  killed run resumes bitwise. Off, training follows `thread_governor` like `rllm eval` (faster beside busy
  neighbours, 1.2-2.5x, but a resumed run then differs from an uninterrupted one in the last bits).
- `fast_chat_templates`: plain chat messages render through transformers' compiled template directly (its private
  `chat_template_utils` helpers, `rllm.models.chat`), about half the per-call cost of `apply_chat_template`, the
  same text.
- `trim_freed_memory`: after each training step, glibc's allocator returns the memory freed during the step to the
  system (`malloc_trim(0)`, `trim_freed_memory()`). A step frees and remakes the packed weight copies (and the
  update its temporaries); glibc keeps such memory for reuse and returned it only in bursts, so a full fine-tuning
  run's resident floor rose in a sawtooth of several hundred MB (issue 53). A no-op on other C libraries.
CUDA graphs and the prefix cache are not here: they change nothing outside one model, so they are that model's
settings (`rllm.inference.InferenceOptions`, the config's `inference:`), on without `enable()`.

The settings are read when the code that applies them runs: an engine call reads `gc_tuning` as it starts, a
`LocalModel` or a torch backend reads the rest when it is built. So enable before building models.

The environment variables that switched some of these before (`RLLM_PACKED_LINEARS`, `RLLM_CUDA_GRAPHS`,
`RLLM_PREFIX_CACHE`) are no longer read: `enable()` refuses to run while one is set, naming the config key that
replaces it, rather than silently ignoring an A/B switch.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import os
from collections.abc import Iterator

from rllm.errors import RllmError

__all__ = ["OFF", "RuntimeOptions", "disable", "enable", "enabled", "options", "trim_freed_memory"]


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    """Which process-wide tunings run (module docstring). The defaults are what `enable()` turns on: all of them."""

    gc_tuning: bool = True
    eager_request_writes: bool = True
    packed_linears: bool = True
    thread_governor: bool = True
    fixed_training_threads: bool = True
    fast_chat_templates: bool = True
    trim_freed_memory: bool = True

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, bool):
                raise TypeError(f"RuntimeOptions.{field.name} must be True or False, got {value!r}")


# What runs without `enable()`: nothing that changes process-wide state.
OFF = RuntimeOptions(
    gc_tuning=False,
    eager_request_writes=False,
    packed_linears=False,
    thread_governor=False,
    fixed_training_threads=False,
    fast_chat_templates=False,
    trim_freed_memory=False,
)

# the environment variables of earlier releases -> the setting that replaces each
_RETIRED_ENV = {
    "RLLM_PACKED_LINEARS": "runtime.packed_linears=false in the config (or RuntimeOptions(packed_linears=False))",
    "RLLM_CUDA_GRAPHS": "inference.cuda_graphs=false in the config (or InferenceOptions(cuda_graphs=False))",
    "RLLM_PREFIX_CACHE": "inference.prefix_cache_tokens=0 in the config (or InferenceOptions(prefix_cache_tokens=0))",
}

_active = OFF


def options() -> RuntimeOptions:
    """The tunings in force now: `OFF` until `enable()`."""
    return _active


def enable(chosen: RuntimeOptions | None = None) -> RuntimeOptions:
    """Turn on the tunings `chosen` names (default: all) for the whole process, until `disable()`; returns the
    options that were in force before. Refused while a retired environment variable is set (module docstring)."""
    global _active
    if chosen is not None and not isinstance(chosen, RuntimeOptions):
        raise TypeError(f"rllm.runtime.enable takes a RuntimeOptions, got {type(chosen).__name__}")
    _refuse_retired_env()
    previous, _active = _active, chosen if chosen is not None else RuntimeOptions()
    return previous


def disable() -> None:
    """Back to `OFF`: code that applies a tuning from now on leaves process-wide state alone."""
    global _active
    _active = OFF


@contextlib.contextmanager
def enabled(chosen: RuntimeOptions | None = None) -> Iterator[RuntimeOptions]:
    """`enable(chosen)` for the block; the options before it are put back after (tests, scoped benchmarks)."""
    global _active
    previous = enable(chosen)
    try:
        yield _active
    finally:
        _active = previous


def trim_freed_memory() -> bool:
    """Where `trim_freed_memory` is on and the C library is glibc: hand the memory freed since to the system
    (`malloc_trim(0)`); returns whether it ran. Called by the trainer after each step."""
    if not _active.trim_freed_memory:
        return False
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _refuse_retired_env() -> None:
    for name, replacement in _RETIRED_ENV.items():
        if name in os.environ:
            raise RllmError(f"{name} is no longer read: unset it and set {replacement}")

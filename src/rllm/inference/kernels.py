"""Which kernel runs each linear layer shape of a model on this CPU: packed oneDNN or torch's default, chosen by
measurement once per machine and cached.

Packed oneDNN weights (`rllm.inference.packed_linears`) won by 2.3-3.6x on the 2-core AMD EPYC this project was
first measured on, where torch's default fp32 path (an MKL sgemm) ran the model's shapes at 180-220 GFLOP/s. On an
Intel Xeon (avx512, AMX) MKL is strong: packing won by 1.0-1.5x on some shapes, lost on others, and every packed
copy costs the weight's size again in memory. So the path is measured, not assumed. The rules:

- A shape is a linear layer's weight `[out, in]`, and for a frozen weight under autograd also its input gradient's
  linear (`grad @ weight`, packed as `weight.T`, written `out x in^T`): `LinearShape`. An input gradient runs at a
  training micro-batch's rows, so it is timed at `PREFILL_ROWS` only and that choice holds at any row count.
- Each shape is timed at two row counts, `DECODE_ROWS` (a decode step's batch) and `PREFILL_ROWS` (a prefill chunk
  or a training micro-batch), each path `ROUNDS` times (up to `MAX_ROUNDS` while that takes under 20 ms), the two
  paths interleaved, the fastest run of each kept (a shared machine's noise only ever adds time), on one thread
  (`packed_linears.time_paths` says why). Weights larger than `TIMED_DIM` in a dimension (an output layer of 49,152
  rows) are timed on a `TIMED_DIM` slice: past the caches the rate no longer depends on the size much, and the
  full output layer would take most of the budget.
- Packed wins a row count only when it takes at most `1 - PACKED_MUST_SAVE` of the default's time: its copy costs
  memory, so a tie goes to torch's default. A linear of at most `DECODE_UP_TO` rows runs the decode choice, a
  larger one the prefill choice.
- A packed copy is made (at first use) only for a shape that chose packing at some row count, so a model whose
  shapes all chose the default holds no copy at all.
- The choice is cached in `$RLLM_HOME/kernels.json`, keyed by the machine (`machine_key`: the CPU model and its
  kernel extensions and torch's version) and, inside that, by shape; a cached shape is reused without timing, a new
  shape is timed and added. So a run's numerics (each path sums in its own order) repeat on the machine that
  produced them, and a changed CPU or torch measures again. Delete the file to measure again by hand.
- One measurement per machine and shape, also when processes start at once (the test suite's workers, two runs
  launched together): the cache is read, measured into and written under an exclusive lock on
  `kernels.json.lock`, and a shape already cached is never overwritten. Two processes that raced would otherwise
  each keep their own timing's choice, and their results would differ in the last bits.
- A resumed run keeps the choice its manifest recorded (`KernelChoice.from_record`, `rllm.training.numerics`),
  whatever the cache says now (deleted, or measured again on another machine): both paths run on any CPU, and a
  resume must repeat the run it continues bitwise.
- Each path's numerics are its own and unchanged: packed runs `_onednn_linear` at `padded_rows`, default runs
  `F.linear` (`grad @ weight` for the input gradient). bf16 through oneDNN is not a candidate: a fp32 model stays
  fp32 (packed linears take fp32 only), a bf16 model keeps torch's path.

`KernelChoice.fixed(path)` runs one path everywhere, unmeasured (tests, and a benchmark's "before").
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm.cpus import cpu_extensions, cpu_model
from rllm.fsutil import rllm_home, write_text_atomically

__all__ = [
    "DECODE_ROWS",
    "DECODE_UP_TO",
    "DEFAULT",
    "PACKED",
    "PREFILL_ROWS",
    "KernelChoice",
    "LinearShape",
    "cache_file",
    "machine_key",
]

PACKED, DEFAULT = "packed", "default"
PATHS = (PACKED, DEFAULT)
DECODE_ROWS, PREFILL_ROWS = 32, 256  # both exact row counts of `padded_rows`: timing adds no oneDNN state
DECODE_UP_TO = 64  # a linear of at most this many rows runs the decode choice
PACKED_MUST_SAVE = 0.10  # packed is chosen only when it saves at least this share of the default's time
ROUNDS, MAX_ROUNDS, ROUNDS_BUDGET_S = 3, 7, 0.02  # rounds per shape and row count: more for a cheap shape
TIMED_DIM = 4096
CACHE_VERSION = 1

# (shape, rows) -> {path: seconds}: the time of one linear on each path (`packed_linears.time_paths` is the real one)
Timer = Callable[["LinearShape", int], dict[str, float]]


@dataclass(frozen=True)
class LinearShape:
    """A linear layer's weight shape `[out, in]`; `transposed`: its input gradient's linear, `grad @ weight`."""

    out_features: int
    in_features: int
    transposed: bool = False

    @property
    def key(self) -> str:
        return f"{self.out_features}x{self.in_features}{'^T' if self.transposed else ''}"


def machine_key() -> dict[str, Any]:
    """What a measured choice holds for: the CPU model, its kernel extensions and torch's version."""
    import torch

    return {
        "cpu": cpu_model(),
        "extensions": list(cpu_extensions()),
        "torch": torch.__version__,
    }


def cache_file() -> Path:
    return rllm_home() / "kernels.json"


class KernelChoice:
    """The path each shape runs at decode and at prefill row counts. See the module docstring."""

    def __init__(
        self,
        *,
        fixed: str | None = None,
        timer: Timer | None = None,
        recorded: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """`timer` times the paths of one shape at one row count (`packed_linears.time_paths`); `fixed`:
        one path for every shape instead, unmeasured; `recorded`: the paths per shape a run's manifest holds, used
        as they are (a shape not among them is chosen as usual)."""
        if fixed is not None and fixed not in PATHS:
            raise ValueError(f"kernels: {fixed!r} is not a path; use one of {', '.join(PATHS)} or None (measured)")
        self._fixed, self._timer = fixed, timer
        self.paths: dict[str, dict[str, str]] = dict(recorded or {})  # shape key -> {"decode": path, "prefill": ...}
        self.recorded = bool(recorded)
        self.timings: dict[str, dict[str, float]] = {}  # shape key -> ms per path and row count, as measured
        self.measured = 0  # shapes timed by this process (0: all from the cache)
        self.seconds = 0.0  # time spent timing

    @classmethod
    def fixed(cls, path: str) -> KernelChoice:
        """`path` for every shape, unmeasured."""
        return cls(fixed=path)

    @classmethod
    def from_record(cls, record: Any, *, timer: Timer | None = None) -> KernelChoice:
        """The choice a run's manifest recorded (`record()`'s dict) made again: its fixed path, or its paths per
        shape; measured with `timer` (or cached) as usual where there is no readable record (None: a fresh run)."""
        if not isinstance(record, dict):
            return cls(timer=timer)
        choice = record.get("choice")
        if isinstance(choice, str) and choice.startswith("fixed: ") and choice[len("fixed: ") :] in PATHS:
            return cls.fixed(choice[len("fixed: ") :])
        shapes = record.get("shapes")
        return cls(timer=timer, recorded=_valid_paths(shapes) if isinstance(shapes, dict) else None)

    def add(self, shapes: Iterable[LinearShape]) -> None:
        """Choose for `shapes` not chosen yet: from the cache where it has them, else timed (and cached)."""
        if self._fixed is not None:
            return
        missing = {shape.key: shape for shape in shapes if shape.key not in self.paths}
        if not missing:
            return
        machine = machine_key()
        with _cache_lock():  # one process measures a shape; the others wait and read its choice
            cached = _read_cache(machine)
            for key in list(missing):
                if key in cached:
                    self.paths[key] = cached.pop(key)
                    del missing[key]
            if missing:
                self._measure(list(missing.values()))
                _write_cache(machine, {key: self.paths[key] for key in missing})

    def path(self, shape: LinearShape, rows: int) -> str:
        """The path a linear of `shape` and `rows` rows runs; a shape never added is chosen now."""
        if self._fixed is not None:
            return self._fixed
        if shape.key not in self.paths:
            self.add([shape])
        return self.paths[shape.key]["decode" if rows <= DECODE_UP_TO else "prefill"]

    def packs(self, shape: LinearShape) -> bool:
        """Whether `shape` runs packed at some row count (so its packed copy may be made)."""
        if self._fixed is not None:
            return self._fixed == PACKED
        return PACKED in self.paths.get(shape.key, {}).values()

    def record(self) -> dict[str, Any]:
        """What a run's manifest records: how the choice was made, the machine, each shape's paths."""
        if self._fixed is not None:
            return {"choice": f"fixed: {self._fixed}"}
        return {
            "choice": "recorded" if self.recorded else "measured" if self.measured else "cached",
            "machine": machine_key(),
            "shapes": dict(sorted(self.paths.items())),
            "measured_shapes": self.measured,
            "seconds": round(self.seconds, 3),
        }

    def describe(self) -> str:
        """One line for a start line or a benchmark's `device:` line."""
        if self._fixed is not None:
            return f"{self._fixed} for every linear shape (fixed)"
        shapes = len(self.paths)
        decode = sum(paths["decode"] == PACKED for paths in self.paths.values())
        prefill = sum(paths["prefill"] == PACKED for paths in self.paths.values())
        how = f"measured {self.measured} in {self.seconds:.2f} s" if self.measured else "cached"
        if self.recorded:  # and any shape the record lacked, measured or cached
            how = "the run's recorded choice" + (f", {how}" if self.measured else "")
        return f"packed oneDNN for {decode}/{shapes} linear shapes at decode, {prefill}/{shapes} at prefill ({how})"

    def _measure(self, shapes: list[LinearShape]) -> None:
        timer = self._timer
        if timer is None:
            raise ValueError("KernelChoice: measuring needs a timer (packed_linears.time_paths), or use fixed=")
        start = time.perf_counter()
        for shape in shapes:
            prefill = timer(shape, PREFILL_ROWS)
            decode = prefill if shape.transposed else timer(shape, DECODE_ROWS)
            self.paths[shape.key] = {"decode": faster_path(decode), "prefill": faster_path(prefill)}
            timed = {PREFILL_ROWS: prefill} if shape.transposed else {DECODE_ROWS: decode, PREFILL_ROWS: prefill}
            self.timings[shape.key] = {
                f"{path}@{rows}": round(seconds * 1e3, 4)
                for rows, times in timed.items()
                for path, seconds in times.items()
            }
        self.measured += len(shapes)
        self.seconds += time.perf_counter() - start


def faster_path(times: dict[str, float]) -> str:
    """Packed where it takes at most `1 - PACKED_MUST_SAVE` of the default's time, else the default."""
    return PACKED if times[PACKED] <= (1 - PACKED_MUST_SAVE) * times[DEFAULT] else DEFAULT


def _valid_paths(shapes: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The entries of `shapes` that name a path at both row counts (a hand-edited or torn entry is chosen again)."""
    return {
        key: {"decode": paths["decode"], "prefill": paths["prefill"]}
        for key, paths in shapes.items()
        if isinstance(paths, dict) and {paths.get("decode"), paths.get("prefill")} <= set(PATHS)
    }


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    """An exclusive lock on `kernels.json.lock` beside the cache (none where it cannot be made: a read-only home
    measures in each process, as without a cache)."""
    lock = cache_file().with_name(cache_file().name + ".lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a+")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def _read_cache(machine: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The cached paths per shape for `machine` (none where the file is missing, unreadable or of another format)."""
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    machines = data.get("machines")
    entry = machines.get(_machine_id(machine), {}) if isinstance(machines, dict) else {}
    shapes = entry.get("shapes", {}) if isinstance(entry, dict) else {}
    return _valid_paths(shapes) if isinstance(shapes, dict) else {}


def _write_cache(machine: dict[str, Any], paths: dict[str, dict[str, str]]) -> None:
    """Add `paths` to `machine`'s entry, under `_cache_lock`. Atomic: a reader never sees a torn file. A cache that
    cannot be written (a read-only home) only costs the timing again."""
    path = cache_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            data = {}
    except (OSError, ValueError):
        data = {}
    if not isinstance(data.get("machines"), dict):
        data["machines"] = {}
    entry = data["machines"].get(_machine_id(machine))
    shapes = _valid_paths(entry["shapes"]) if isinstance(entry, dict) and isinstance(entry.get("shapes"), dict) else {}
    data["machines"][_machine_id(machine)] = {"machine": machine, "shapes": {**paths, **shapes}}  # cached ones stay
    data["version"] = CACHE_VERSION
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass


def _machine_id(machine: dict[str, Any]) -> str:
    return json.dumps(machine, sort_keys=True)

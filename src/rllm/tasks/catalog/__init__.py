"""Benchmarks by name: a catalog of real benchmarks (`rllm datasets list`), each usable as a task
(`rllm eval gsm8k`, `rllm train gsm8k`, `data.task: gsm8k`).

- `entry`: what one entry says (`Benchmark`); `entries`: the entries; `rows`: converters for what a column
  renaming cannot say; `verify`: the verifiers by name; `loading`: reading rows with `datasets` from the hub or a
  local copy, and `pull`; `task`: an entry as a `Task`.
"""

from __future__ import annotations

import difflib

from rllm.errors import RllmError
from rllm.tasks.catalog.entries import ENTRIES
from rllm.tasks.catalog.entry import Benchmark

__all__ = ["CATALOG", "Benchmark", "UnknownBenchmarkError", "get_benchmark"]

CATALOG: dict[str, Benchmark] = {bench.name: bench for bench in ENTRIES}


class UnknownBenchmarkError(RllmError, KeyError):
    """No catalog entry has that name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def get_benchmark(name: str) -> Benchmark:
    """The entry called `name`; one line with the closest names otherwise."""
    if name not in CATALOG:
        close = difflib.get_close_matches(name, CATALOG, n=3, cutoff=0.75)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}{hint} (`rllm datasets list` shows them all)")
    return CATALOG[name]

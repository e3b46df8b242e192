"""One catalog entry: a real benchmark, said declaratively.

An entry names where the benchmark lives (a Hugging Face dataset: `source`, `configs`, the hub split that serves
evaluation and the one that serves training), how one of its rows becomes an rllm task (`fields`: canonical name ->
source column, and `convert`: the name of a function in `rllm.tasks.catalog.rows` for what a renaming cannot say),
what the model is told (`template`, which states the answer format the verifier reads) and how a reply is scored
(`verifier`: a name in `rllm.tasks.catalog.verify.VERIFIERS`).

Canonical fields every converted row has: `id`, `question` (what the template shows as the problem) and what its
verifier reads (see `verify.REQUIRED_FIELDS`). A row may also carry `reference`: a reply its verifier scores 1 (the
dataset's own solution), which the fixture tests use to check each entry end to end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["CATEGORIES", "Benchmark"]

CATEGORIES = (
    "math",
    "code",
    "mcq",
    "qa",
    "instruction_following",
    "function_calling",
    "translation",
    "reasoning",
    "vision",
    "swe",
)


@dataclass(frozen=True, eq=False)  # hashed by identity: an entry is a constant
class Benchmark:
    """A benchmark by name (see the module docstring for what each field means)."""

    name: str
    category: str
    description: str
    source: str  # the Hugging Face dataset id, e.g. "openai/gsm8k"
    verifier: str
    eval_split: str = "test"
    train_split: str | None = None  # None: the benchmark has no training split; training uses eval_split
    configs: tuple[str, ...] = ()  # () the default config; several: their rows concatenated, each row tagged
    data_files: tuple[str, ...] = ()  # read these files of the repository instead of its configs (e.g. BFCL)
    fields: Mapping[str, str] = field(default_factory=dict)  # canonical -> source column ("a.b": nested key)
    convert: str | None = None  # a function of rllm.tasks.catalog.rows: (canonical, source row) -> canonical
    template: str = "{question}"  # str.format over the canonical row
    agent: str = "single_turn"  # the workflow (or harness) that plays it by default
    homepage: str = ""

    def hub_split(self, split: str) -> str:
        """The hub split that serves rllm's `split` ("train" or "val"/"eval")."""
        if split == "train" and self.train_split is not None:
            return self.train_split
        return self.eval_split

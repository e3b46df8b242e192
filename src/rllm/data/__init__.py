"""Datasets. The built-in tasks and their registry moved to `rllm.tasks`; their old names here (`BUILTIN_TASKS`,
`BuiltinTask`, `get_builtin_task`) keep working for one release, each with a DeprecationWarning."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from rllm._deprecation import warn_renamed

__all__: list[str] = []

# old name -> what replaces it
_REPLACEMENTS = {
    "BUILTIN_TASKS": "rllm.tasks.get_task(name) (names: rllm.tasks.TASK_NAMES)",
    "BuiltinTask": "rllm.tasks.Task",
    "get_builtin_task": "rllm.tasks.get_task",
}


class _TasksByName(Mapping):
    """What `BUILTIN_TASKS` was, name -> task; a task's module is imported when it is looked up."""

    def __getitem__(self, name: str) -> Any:
        tasks = importlib.import_module("rllm.tasks")
        if name not in tasks.REGISTRY:
            raise KeyError(name)
        return tasks.get_task(name)

    def __iter__(self) -> Iterator[str]:
        return iter(importlib.import_module("rllm.tasks").TASK_NAMES)

    def __len__(self) -> int:
        return len(importlib.import_module("rllm.tasks").REGISTRY)


def _old_registry_name(name: str) -> Any:
    """The object an old registry name stands for, after a DeprecationWarning naming its replacement. Called from a
    module `__getattr__` (this one's, or `rllm.tasks`' for the old path `rllm.data.builtin`), so the warning points
    at the caller's caller."""
    warn_renamed(f"rllm.data.{name}", _REPLACEMENTS[name], stacklevel=4)
    tasks = importlib.import_module("rllm.tasks")
    return {"BUILTIN_TASKS": _TasksByName(), "BuiltinTask": tasks.Task, "get_builtin_task": tasks.get_task}[name]


def __getattr__(name: str) -> Any:
    if name in _REPLACEMENTS:
        return _old_registry_name(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

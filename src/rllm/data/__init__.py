"""The old home of the built-in tasks. `Dataset` and `DatasetRegistry` here are rLLM v0.2's (`rllm.data.dataset`: named
task rows stored under `$RLLM_HOME/datasets`), in `rllm.compat.data`, served here by the rule in `rllm.compat`. The
built-in tasks and their registry moved to `rllm.tasks`; their old names here
(`BUILTIN_TASKS`, `BuiltinTask`, `get_builtin_task`) keep working for one release, each with a DeprecationWarning."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from rllm._deprecation import moved_attribute, warn_renamed

__all__: list[str] = []


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


def builtin_tasks_mapping(module: str) -> _TasksByName:
    """The old `BUILTIN_TASKS`, served by this package and by `rllm.tasks` (the old `rllm.data.builtin`)."""
    warn_renamed(f"{module}.BUILTIN_TASKS", "rllm.tasks.get_task(name) (names: rllm.tasks.TASK_NAMES)", stacklevel=4)
    return _TasksByName()


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_TASKS":
        return builtin_tasks_mapping(__name__)
    return moved_attribute(__name__, name)  # BuiltinTask, get_builtin_task: rllm._deprecation.MOVED_NAMES

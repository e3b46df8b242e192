"""The old home of the built-in tasks. `Dataset` and `DatasetRegistry` here are rLLM v0.2's (`rllm.data.dataset`: named
task rows stored under `$RLLM_HOME/datasets`), in `rllm.compat.data`, served here by the rule in `rllm.compat`. The
built-in tasks and their registry moved to `rllm.tasks`; their old names here
(`BUILTIN_TASKS`, `BuiltinTask`, `get_builtin_task`) keep working for one release, each with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

from rllm._deprecation import moved_attribute

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_TASKS":  # the mapping lives with the tasks: this old home imports them, never the reverse
        from rllm.tasks import builtin_tasks_mapping

        return builtin_tasks_mapping(__name__)
    return moved_attribute(__name__, name)  # BuiltinTask, get_builtin_task: rllm._deprecation.MOVED_NAMES

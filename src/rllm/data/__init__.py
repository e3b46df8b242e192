"""Datasets: the built-in task sets (generated locally, so everything runs offline) and their registry."""

from rllm.data.builtin import BUILTIN_TASKS, BuiltinTask, get_builtin_task

__all__ = ["BUILTIN_TASKS", "BuiltinTask", "get_builtin_task"]

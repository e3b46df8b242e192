"""A compat package's names, each imported from its module on first use (rLLM's modules pull in their own
dependencies: gymnasium, the sandbox, mcp, ...)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` (`rllm.compat.X`) serving `name` from `package.<where[name]>`; errors
    name rLLM's path (`rllm.X`), the one the user wrote."""
    shown = package.replace("rllm.compat.", "rllm.", 1)

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module {shown!r} has no attribute {name!r}")

    return __getattr__

"""Which keyword arguments a class or function uses, and the one-line error for one it does not.

The config's free-form dicts (`data.task_args`, `agent_args`, `env_args`, `workflow_args`) go to a callable's
keywords. A typo there is either a `TypeError` from deep inside the first rollout or, for a class that takes
`**kwargs`, silently ignored. `check_keywords` refuses such a key before anything runs, naming the setting, the key,
the closest valid names and all of them, like an unknown config key (`rllm.config`).

What a class accepts is read from its `__init__` signatures along the MRO: a `**kwargs` is taken to be passed on
to the next `__init__` (`super().__init__(**kwargs)`, the convention of every agent rllm ships), a `**_` (any name
starting with `_`) to be discarded, so `BaseAgent.__init__(self, **_)` ends the walk. A function, or a class whose
`**kwargs` reaches no `__init__` that ends the walk, accepts anything: then nothing can be checked and nothing is.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from rllm.errors import RllmError

__all__ = ["UnknownArgumentError", "accepted_keywords", "check_keywords", "did_you_mean"]

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class UnknownArgumentError(RllmError, TypeError):
    """A keyword argument the callable it goes to does not take."""


def did_you_mean(name: str, candidates: Iterable[str], prefix: str = "") -> str:
    """` (did you mean 'a' or 'b'?)` for the candidates close to `name` (each as `prefix.candidate`), or ''."""
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    if not close:
        return ""
    full = [f"{prefix}.{c}" if prefix else c for c in close]
    return " (did you mean " + " or ".join(repr(c) for c in full) + "?)"


def accepted_keywords(target: Callable[..., Any]) -> set[str] | None:
    """The keyword names `target(...)` uses (a class: its `__init__`s, module docstring); None: any keyword."""
    is_class = isinstance(target, type)
    functions = [vars(k)["__init__"] for k in target.__mro__ if "__init__" in vars(k)] if is_class else [target]
    names: set[str] = set()
    for function in functions:
        if function is object.__init__:
            return names
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature
            return None
        names.update(p.name for p in parameters if p.kind in _NAMED and p.name != "self")
        rest = next((p for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD), None)
        if rest is None or rest.name.startswith("_"):
            return names
        if not is_class:
            return None
    return None


def check_keywords(
    given: dict[str, Any],
    accepted: set[str] | None,
    *,
    setting: str,
    goes_to: str,
    reserved: dict[str, str] | None = None,
) -> None:
    """`UnknownArgumentError` for the first key of `given` that is not `accepted` (None: all are), e.g.
    `env_args.is_slipery: FrozenLakeEnv takes no such argument (did you mean ...?); it takes size, ...`.
    `reserved` maps keys set elsewhere to where (`{"seed": "data.seed"}`)."""
    for key in given:
        if key in (reserved or {}):
            raise UnknownArgumentError(f"{setting}.{key}: set it with {reserved[key]}, not {setting}")
        if accepted is None or key in accepted:
            continue
        valid = sorted(accepted - set(reserved or {}))
        takes = f"it takes {', '.join(valid)}" if valid else "it takes none"
        hint = did_you_mean(key, valid, setting)
        raise UnknownArgumentError(f"{setting}.{key}: {goes_to} takes no such argument{hint}; {takes}")

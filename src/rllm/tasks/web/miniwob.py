"""The MiniWoB++ task pages (from PyPI's `miniwob` wheel, which ships all 130 as HTML) and their split.

The split is by task family (a task and its `-nodelay`/`-easy`/`-medium`/`-hard` variants stay on one side, so no
validation task is a variant of a training task): the families are shuffled with `random.Random(SPLIT_SEED)` and
taken into validation until it holds at least `VALIDATION_SIZE` tasks, about the share rLLM held out (29 of
BrowserGym's 125). `SPLIT_SEED` is the first seed whose validation side leaves the easy tasks the GRPO config trains
on (`EASY_TASKS`) in training.
"""

from __future__ import annotations

import difflib
import functools
import random
import re
from pathlib import Path

__all__ = ["EASY_TASKS", "SPLIT_SEED", "VALIDATION_SIZE", "miniwob_root", "split_tasks", "task_names", "task_url"]

VALIDATION_SIZE = 29
EASY_TASKS = ("click-test", "click-button", "enter-text")
SPLIT_SEED = 2  # checked by tests/unit/test_web_tasks.py: EASY_TASKS are all on the training side
_VARIANT = re.compile(r"-(nodelay|easy|medium|hard)$")


def miniwob_root() -> Path:
    """The wheel's `html/` folder (core JS and CSS beside the task pages in `html/miniwob/`)."""
    try:
        import miniwob
    except ImportError as e:
        raise ImportError("web tasks need the MiniWoB++ pages: pip install 'rllm[web]' (or miniwob==1.1.0)") from e
    return Path(miniwob.__file__).parent / "html"


@functools.cache
def task_names() -> tuple[str, ...]:
    return tuple(sorted(path.stem for path in (miniwob_root() / "miniwob").glob("*.html")))


def task_url(name: str) -> str:
    if name not in task_names():
        close = difflib.get_close_matches(name, task_names(), n=5, cutoff=0.5) or list(task_names()[:5])
        raise ValueError(
            f"unknown MiniWoB++ task {name!r}: did you mean {', '.join(close)}? "
            "(rllm.tasks.web.miniwob.task_names() lists all 130)"
        )
    return (miniwob_root() / "miniwob" / f"{name}.html").as_uri()


def family(name: str) -> str:
    return _VARIANT.sub("", name)


@functools.cache
def split_tasks(seed: int = SPLIT_SEED) -> dict[str, tuple[str, ...]]:
    """{"train": names, "validation": names}: see the module docstring."""
    families: dict[str, list[str]] = {}
    for name in task_names():
        families.setdefault(family(name), []).append(name)
    order = sorted(families)
    random.Random(seed).shuffle(order)
    validation: list[str] = []
    for fam in order:
        if len(validation) >= VALIDATION_SIZE:
            break
        validation += families[fam]
    held = set(validation)
    return {"train": tuple(t for t in task_names() if t not in held), "validation": tuple(sorted(held))}

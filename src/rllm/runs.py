"""Run directories on disk: every run writes what it produced (episodes JSONL, a summary/metrics JSON) so it can be
read back, viewed and compared. Training (next layer up) adds checkpoints to the same layout."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

__all__ = ["make_run_dir", "read_episodes", "write_json", "write_jsonl"]


def make_run_dir(kind: str, name: str, root: str | os.PathLike = "runs") -> Path:
    """A new, unique folder `root/{kind}-{name}-{timestamp}`."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(root) / f"{kind}-{name}-{stamp}"
    path, i = base, 1
    while path.exists():
        path, i = Path(f"{base}-{i}"), i + 1
    path.mkdir(parents=True)
    return path


def write_jsonl(path: str | os.PathLike, items: Iterable[BaseModel | dict]) -> int:
    """Write one JSON object per line; returns how many were written."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for item in items:
            f.write(item.model_dump_json() if isinstance(item, BaseModel) else json.dumps(item))
            f.write("\n")
            count += 1
    return count


def write_json(path: str | os.PathLike, data: Any) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_episodes(path: str | os.PathLike) -> list:
    from rllm.types import Episode

    with open(path, encoding="utf-8") as f:
        return [Episode.model_validate_json(line) for line in f if line.strip()]

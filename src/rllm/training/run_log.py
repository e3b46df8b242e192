"""What a training run writes as it goes: metrics JSONL (one line per step), episodes JSONL, optional TensorBoard
events, and a task sampler whose position is part of the checkpoint."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rllm.types import Episode

__all__ = ["MetricsLog", "TaskSampler"]


class TaskSampler:
    """Hands out tasks in epochs, each a seeded shuffle of the dataset; `position` (tasks handed out so far) fully
    determines what comes next, so a resumed run sees the same tasks as an uninterrupted one."""

    def __init__(self, tasks: list[dict], seed: int, position: int = 0) -> None:
        if not tasks:
            raise ValueError("the training dataset is empty: give train_dataset rows or set data.train_size >= 1")
        self.tasks, self.seed, self.position = tasks, seed, position

    def take(self, k: int) -> list[dict]:
        out = []
        for _ in range(k):
            epoch, index = divmod(self.position, len(self.tasks))
            order = list(range(len(self.tasks)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            out.append(self.tasks[order[index]])
            self.position += 1
        return out


class MetricsLog:
    """Appends one JSON line per step to `metrics.jsonl` (and TensorBoard scalars when enabled). On resume, lines
    from steps after the checkpoint (written before a crash) are dropped so the file matches an uninterrupted run."""

    def __init__(self, run_dir: Path, *, tensorboard: bool, resume_step: int | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.episodes_path = run_dir / "episodes.jsonl"
        if resume_step is not None:
            _truncate_after(self.path, resume_step)
            _truncate_after(self.episodes_path, resume_step)
        self._tb = _tensorboard_writer(run_dir) if tensorboard else None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, **metrics}, sort_keys=True) + "\n")
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def log_episodes(self, step: int, episodes: list[Episode], split: str) -> None:
        with open(self.episodes_path, "a", encoding="utf-8") as f:
            f.writelines(json.dumps({"step": step, "split": split, "episode": episode.model_dump(mode="json")}) + "\n" for episode in episodes)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _tensorboard_writer(run_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:  # the tensorboard package is missing
        raise RuntimeError("trainer.tensorboard=true needs the tensorboard package: pip install tensorboard") from exc
    return SummaryWriter(log_dir=str(run_dir / "tensorboard"))


def _truncate_after(path: Path, step: int) -> None:
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(line for line in lines if json.loads(line)["step"] <= step), encoding="utf-8")

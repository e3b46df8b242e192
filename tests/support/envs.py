"""Environments the tests run episodes in (a counter, a picture show, a letter game) and a run made of one."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from PIL import Image

from rllm.agents.base import BaseAgent
from rllm.engine import AgentExecutionEngine
from rllm.envs.base import BaseEnv
from rllm.models.fake import FakeModel


class CounterEnv(BaseEnv):
    """Done after `k` steps; reward 1 for an action that contains `keyword`. `log` (a shared dict from env_args)
    counts lifecycle calls across instances; `fail_step` makes the first `fail_step` step calls of a task raise."""

    def __init__(self, name: str, k: int, keyword: str, log: dict, fail_step: int, step_sleep: float) -> None:
        self.name, self.k, self.keyword, self.log = name, k, keyword, log
        self.fail_step, self.step_sleep, self.t = fail_step, step_sleep, 0

    @classmethod
    def from_dict(cls, task: dict) -> CounterEnv:
        return cls(
            name=str(task.get("id", "?")),
            k=task.get("k", 3),
            keyword=task.get("keyword", "yes"),
            log=task.get("log", Counter()),
            fail_step=task.get("fail_step", 0),
            step_sleep=task.get("step_sleep", 0.0),
        )

    def reset(self) -> tuple[Any, dict]:
        self.t = 0
        return f"task {self.name}", {}

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:
        self.log["step"] += 1
        self.log[f"step:{self.name}"] += 1
        if self.log[f"step:{self.name}"] <= self.fail_step:
            raise RuntimeError(f"env crashed on {self.name}")
        if self.step_sleep:
            time.sleep(self.step_sleep)
        self.t += 1
        return (f"obs {self.t}", float(self.keyword in str(action)), self.t >= self.k, {"t": self.t})

    def close(self) -> None:
        self.log["close"] += 1


class LetterEnv(BaseEnv):
    """Two turns; each reply earns 1 if it contains the task's letter. A random model earns it often enough for
    every group to have reward variance, so the weights really move."""

    def __init__(self, letter: str) -> None:
        self.letter, self.turn = letter, 0

    @classmethod
    def from_dict(cls, task: dict) -> LetterEnv:
        return cls(task["letter"])

    def reset(self):
        self.turn = 0
        return f"Write words with the letter {self.letter}.", {}

    def step(self, action):
        self.turn += 1
        return "Again.", float(self.letter in str(action)), self.turn >= 2, {}


def picture(size=(5, 4), colour=(200, 30, 60)) -> Image.Image:
    image = Image.new("RGB", size, colour)
    image.putpixel((1, 2), (0, 255, 0))  # not uniform: a transposed or resized decode would differ
    return image


class PictureEnv(BaseEnv):
    """Shows a picture; the episode ends after the second action. `path` makes the second observation a file."""

    def __init__(self, path: str | None = None) -> None:
        self.path, self.turn = path, 0

    @classmethod
    def from_dict(cls, task: dict) -> PictureEnv:
        return cls(task.get("path"))

    def reset(self):
        self.turn = 0
        return picture(), {}

    def step(self, action):
        if self.turn == 2:
            raise RuntimeError("the episode is over; call reset()")
        self.turn += 1
        if self.path is not None:
            return self.path, 0.0, False, {}
        return picture(colour=(0, 0, 255)), float(self.turn == 2), self.turn == 2, {}


def picture_run(root):
    """An eval run directory `root/pics` holding one PictureEnv episode (two screens, three images shown), as
    `rllm eval` writes it; for the viewer's tests."""
    from rllm.runs import RunLog, write_json

    engine = AgentExecutionEngine(
        agent_class=BaseAgent, env_class=PictureEnv, model=FakeModel(script=["a", "b"]), max_steps=3, env_workers=0
    )
    run = root / "pics"
    run.mkdir()
    write_json(run / "manifest.json", {"kind": "eval", "model": "m"})
    RunLog(run).log_episodes(0, engine.execute_tasks([{"id": "pic"}]), "eval")
    return run

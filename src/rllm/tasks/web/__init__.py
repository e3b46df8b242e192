"""The `web` task: a MiniWoB++ page in a real headless Chromium, played by `WebAgent`.

Rows are `{"id", "task", "seed"}`: a MiniWoB++ task name and the seed its page is generated from. `make_tasks(n,
seed=, split=)` cycles through the split's tasks (`miniwob.split_tasks`: 101 training and 29 validation tasks, split
by task family), each row with its own page seed drawn from `random.Random(seed)`; `tasks=[...]` plays only those
tasks (e.g. the easy ones, `EASY_TASKS`), whatever the split. Reward 1 when the page's own reward is positive
(BrowserGym's MiniWoB reward).

The package holds all of web:
- `env.WebEnv` (and `observation_text`): the environment, driven by Playwright; `agent.WebAgent` plays it.
- `browser`: the shared Chromium pool (the system's headless shell, `find_chromium`); `actions`: the calls a reply
  may make (`click(ref)`, `fill(ref, text)`, ...); `miniwob`: the MiniWoB++ task pages and the split.
- `oracle`: a scripted solver of 30 tasks from the goal and the tree alone (checks the observation is enough).
- `browsergym`: `BrowserGymEnv`, any BrowserGym task, for BrowserGym's own venv (`make browsergym`); nothing here
  imports it.
"""

from __future__ import annotations

import random
from typing import Any

from rllm.tasks import Task
from rllm.tasks.web.agent import WebAgent
from rllm.tasks.web.env import WebEnv, observation_text
from rllm.tasks.web.miniwob import split_tasks, task_url

__all__ = ["TASK", "WebAgent", "WebEnv", "make_web_tasks", "observation_text"]


def make_web_tasks(
    n: int, *, seed: int = 0, split: str = "train", tasks: list[str] | None = None, **env_options: Any
) -> list[dict]:
    """n rows (see the module docstring); `env_options` (e.g. reward, step_timeout) go into every row."""
    if tasks:
        for name in tasks:
            task_url(name)  # an unknown name fails here, naming close ones
        names = list(tasks)
    else:
        names = list(split_tasks()["train" if split == "train" else "validation"])
    rng = random.Random(seed)
    order = names[:]
    rng.shuffle(order)
    rows = []
    for index in range(n):
        name, page_seed = order[index % len(order)], rng.randrange(2**31)
        rows.append({"id": f"{name}-{page_seed}", "task": name, "seed": page_seed, **env_options})
    return rows


TASK = Task(
    name="web",
    description="Do a MiniWoB++ task (click, type, choose, ...) in a real headless Chromium (multi-turn).",
    make_tasks=make_web_tasks,
    agent=WebAgent,
    env=WebEnv,
)

"""Environment hubs: other libraries' environments as rllm tasks, named "hub:name".

`data.task: reasoning_gym:leg_counting` (or `rllm eval textarena:GuessTheNumber-v0`) names an environment of a hub, a
library that ships many of them. `rllm.tasks.get_task` reads the part before the colon, imports the hub's adapter
module from `rllm.tasks.HUBS` and calls its `hub_task(name)` with the part after it.

A hub adapter is one module here, `rllm/tasks/hubs/<hub>.py`, that turns the library's environments into `Task`s
(`rllm.tasks.Task`) without copying any of them:

- `hub_task(name) -> Task` checks the name against the library's own registry (an unknown one: one line with the
  closest names and how to list them all, `unknown_name`) and returns the task; it imports the library inside the
  call (`import_hub_package`), so `import rllm.tasks` stays light and a missing package is one line naming the extra
  that installs it (`pip install 'rllm[hubs]'`).
- Its generator takes `(n, *, seed=0, split="train", **kwargs)`: `DataConfig.make_tasks` passes the split, and
  `data.task_args` arrive as keywords. Rows must be JSON (episodes are written to disk with their task) and the
  same for the same seed. `split_seed` gives each split its own stream of seeds, so training and validation rows
  never share one whatever `data.seed` and `data.val_seed` are.
- What plays it is the library's own: its scorer as the reward function of a prompt/reward task
  (`reasoning_gym`), or its environment wrapped in a `BaseEnv` with a `BaseAgent` for the agent/env loop
  (`textarena`). The library's reward is the reward; nothing is re-implemented.
- `names()` lists what the hub offers, and `python -m rllm.tasks.hubs.<hub>` prints it.

To add a hub: write the module, add `"<hub>": "rllm.tasks.hubs.<hub>"` to `rllm.tasks.HUBS`, pin the library in the
`hubs` extra of pyproject.toml, and test it with the real package (tests/unit/tasks/test_hubs.py, and one evaluation and
one training step through the real loop in tests/integration/test_hubs_train.py). Adapters sit in the tasks layer:
they may import `rllm.agents`, `rllm.envs`, `rllm.rewards` and below, never the workflows, engine or training.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable
from types import ModuleType

from rllm.arguments import did_you_mean
from rllm.tasks import UnknownTaskError

__all__ = ["HUB_EXTRA", "HubError", "import_hub_package", "split_seed", "unknown_name"]

HUB_EXTRA = "pip install 'rllm[hubs]'"
_HALF = 2**31  # training seeds are below it, validation seeds at or above it; all fit numpy's 32-bit seeds


class HubError(UnknownTaskError):
    """A hub cannot give the task named: an unknown name, its package missing, or an environment that cannot run here.
    One line, naming the fix."""


def import_hub_package(module: str, *, package: str, task: str) -> ModuleType:
    """`import module`, or one line saying that `task` ("hub:name") needs `package` and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise HubError(f"{task} needs the {package} package: {HUB_EXTRA}") from None


def unknown_name(hub: str, name: str, names: Iterable[str], *, what: str) -> HubError:
    """The one-line error for a name the hub does not have: the closest ones, and how to list them all."""
    names = list(names)
    return HubError(
        f"{hub} has no {what} {name!r}{did_you_mean(name, names)}; it has {len(names)}: list them with "
        f"`python -m rllm.tasks.hubs.{hub}` (then data.task: {hub}:NAME)"
    )


def split_seed(seed: int, split: str, n: int) -> int:
    """The first of `n` consecutive seeds for the rows of `split` made from `seed`: training rows get seeds in
    [0, 2**31), validation rows in [2**31, 2**32), so the two never share a seed (by construction, for any seeds and
    sizes); where in its half a split starts is a hash of `seed`, so different seeds give different rows."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    if not 0 <= n <= _HALF:
        raise ValueError(f"n must be between 0 and {_HALF}, got {n}")
    digest = hashlib.sha256(f"rllm.tasks.hubs:{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (_HALF - n + 1) + (_HALF if split == "val" else 0)

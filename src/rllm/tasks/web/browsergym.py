"""`BrowserGymEnv`: any BrowserGym task (MiniWoB++, WebArena, WorkArena, ...) as an rllm env, for users who bring
BrowserGym's benchmarks. Optional: `make browsergym` installs BrowserGym into its own venv (`.venv-browsergym`),
because `browsergym-core` pins `playwright==1.44` and rllm's own WebEnv runs on a current Playwright; nothing in
`rllm.tasks.web` imports this module.

- A row is `{"task": "miniwob.click-button", "seed": 3}` (a bare MiniWoB++ name means `miniwob.<name>`); the env is
  `gym.make("browsergym/<task>")`, reset with the seed.
- BrowserGym launches two Chromiums per reset (the page's and a chat window's) and expects Playwright's own
  download. The adapter points both at the system Chromium (`rllm.tasks.web.browser.find_chromium`): the page's
  through `pw_chromium_kwargs={"executable_path": ...}` (only that key: BrowserGym passes `args` itself), the chat
  window's, which takes no kwargs, through a private `PLAYWRIGHT_BROWSERS_PATH` holding the folder Playwright
  1.44 looks for (`chromium-<revision>/chrome-linux/chrome`, the revision read from Playwright's browsers.json) as a
  link to that binary. MiniWoB++ pages come from the `miniwob` wheel (`MINIWOB_URL`), so no clone is needed.
- The observation has WebEnv's shape (`goal`, `axtree`, `url`, `last_action`, `last_action_error`), the tree flattened
  by BrowserGym (`[bid] role 'name'` lines), so `rllm.tasks.web.env.observation_text` and `WebAgent` read it.
  Actions are BrowserGym's own action strings on its bids (`click('12')`, `fill('14', 'text')`), passed through.
- Reward and done are BrowserGym's (for MiniWoB++: 1.0 if the page's raw reward is positive, as WebEnv's binary).
  Its MiniWoB++ page seed is `RandomState(seed).randint(0, 1000000)`: `miniwob_page_seed(seed)` gives it, and
  WebEnv with that seed shows the same page (tests/browsergym/test_parity.py).
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from rllm.envs.base import BaseEnv

__all__ = ["BrowserGymEnv", "miniwob_page_seed"]

_INSTALL = "BrowserGymEnv needs BrowserGym: `make browsergym` installs it into .venv-browsergym (run there)"


def miniwob_page_seed(seed: int) -> int:
    """The seed BrowserGym's MiniWoB++ tasks give the page (`Math.seedrandom`) for an episode seeded `seed`."""
    import numpy as np

    return int(np.random.RandomState(seed).randint(0, 1000000))


def _prepare_browsers() -> str:
    """Point BrowserGym's Playwright at the system Chromium (module docstring); returns the binary."""
    from rllm.tasks.web.browser import find_chromium
    from rllm.tasks.web.miniwob import miniwob_root

    binary = find_chromium()
    import playwright

    manifest = Path(playwright.__file__).parent / "driver" / "package" / "browsers.json"
    revision = next(b["revision"] for b in json.loads(manifest.read_text())["browsers"] if b["name"] == "chromium")
    browsers = Path(tempfile.gettempdir()) / f"rllm-browsergym-{os.getuid()}"
    chrome = browsers / f"chromium-{revision}" / "chrome-linux" / "chrome"
    if not chrome.exists():
        chrome.parent.mkdir(parents=True, exist_ok=True)
        chrome.symlink_to(binary)
    os.environ["PLAYWRIGHT_BROWSERS_PATH"] = str(browsers)
    os.environ.setdefault("MINIWOB_URL", (miniwob_root() / "miniwob").as_uri() + "/")
    return binary


class BrowserGymEnv(BaseEnv):
    blocking = True

    def __init__(self, task: dict | str, *, max_axtree_chars: int = 6000, **gym_kwargs: Any) -> None:
        task = {"task": task} if isinstance(task, str) else dict(task)
        name = str(task["task"])
        self.env_id = name if "." in name else f"miniwob.{name}"
        self.seed, self.max_axtree_chars, self.gym_kwargs = int(task.get("seed", 0)), int(max_axtree_chars), gym_kwargs
        self.task, self.env = task, None

    @classmethod
    def from_dict(cls, task: dict) -> BrowserGymEnv:
        task = dict(task)
        options = {key: task.pop(key) for key in ("max_axtree_chars",) if key in task}
        return cls(task, **options)

    @staticmethod
    def is_multithread_safe() -> bool:
        return False  # BrowserGym drives Playwright's sync API from one global instance

    def reset(self) -> tuple[dict, dict]:
        try:
            importlib.import_module("browsergym.core")  # registers the envs
            import gymnasium as gym
        except ImportError as e:
            raise ImportError(_INSTALL) from e
        if self.env_id.startswith("miniwob."):
            importlib.import_module("browsergym.miniwob")  # registers browsergym/miniwob.*
        binary = _prepare_browsers()
        self.close()
        self.env = gym.make(
            f"browsergym/{self.env_id}", pw_chromium_kwargs={"executable_path": binary}, **self.gym_kwargs
        )
        observation, _ = self.env.reset(seed=self.seed)
        return self._observation(observation), {"task": self.env_id, "seed": self.seed}

    def step(self, action: Any) -> tuple[dict, float, bool, dict]:
        if self.env is None:
            raise RuntimeError("BrowserGymEnv.step() before reset()")
        observation, reward, terminated, truncated, info = self.env.step(str(action))
        done = bool(terminated or truncated)
        return (
            self._observation(observation),
            float(reward),
            done,
            {"task": self.env_id, "seed": self.seed, "browsergym": _plain(info)},
        )

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()

    def _observation(self, observation: dict) -> dict:
        from browsergym.utils.obs import flatten_axtree_to_str

        tree = flatten_axtree_to_str(
            observation["axtree_object"], observation["extra_element_properties"], filter_visible_only=True
        )
        if len(tree) > self.max_axtree_chars:
            tree = tree[: self.max_axtree_chars] + f"\n[... tree cut: {len(tree)} characters in all]"
        return {
            "goal": observation["goal"],
            "axtree": tree,
            "url": observation.get("url"),
            "last_action": observation.get("last_action") or None,
            "last_action_error": observation.get("last_action_error") or None,
        }


def _plain(info: dict) -> dict:
    """BrowserGym's info, JSON-serialisable (episodes are written to disk)."""
    return json.loads(json.dumps(info, default=str))

"""rLLM v0.2's `BrowserGymEnv`, for its MiniWoB++ tasks: played in rllm's own web environment
(`rllm.tasks.web.env.WebEnv`: the MiniWoB++ pages in a headless Chromium driven by Playwright; no BrowserGym, no
MiniWoB++ server, one shared browser per process instead of a browser process per env).

As in rLLM:
- `BrowserGymEnv(env_id="browsergym/miniwob.click-button", **env_kwargs)`; `from_dict(row)` reads the row's `env_id`,
  `headless` and `timeout` (ms per action, default 5000), as rLLM's MiniWoB data rows (`{"env_id": ...}`) give them.
- `reset() -> (observation, info)`, `step(action) -> (observation, reward, done, info)`, `close()`. Each `reset()`
  draws a new page (rLLM's BrowserGym resets unseeded) unless a `seed` is given (`seed=` or a row's `seed`): the
  same seed gives the same page. The reward is 1.0 when the page's own reward is positive (BrowserGym's).
Different here:
- Only MiniWoB++ exists (`browsergym/miniwob.<task>`, the 130 tasks of `rllm.tasks.web.miniwob.task_names()`);
  another family (openended, webarena, workarena, ...) is an error naming rllm's `rllm.tasks.web.browsergym` adapter,
  which runs BrowserGym itself in its own venv (`make browsergym`).
- The observation is WebEnv's dict: `goal`, `axtree` (the page's accessibility snapshot, elements named by refs such
  as `[ref=e5]`), `url`, `last_action`, `last_action_error` (BrowserGym's raw `axtree_object`/`dom_object` are not
  there). Actions are BrowserGym-style calls on those refs: `click('e5')`, `fill('e6', 'text')`, ...
  (`rllm.tasks.web.actions`; BrowserGym's numeric bids such as `click('5')` read as `e5`). rLLM's `MiniWobAgent` here
  reads this shape.
- The browser is always headless (`headless=False` is accepted and ignored). rllm's own WebEnv options (`reward`,
  `step_timeout`, `max_snapshot_chars`, `screenshot`, `max_actions`, `settle_ms`, `browsers`, `viewport`) may be
  given as keyword arguments.
"""

from __future__ import annotations

import random
from typing import Any

from rllm.envs.base import BaseEnv
from rllm.errors import RllmError

__all__ = ["BrowserGymEnv", "UnsupportedBrowserGymTaskError"]

_PREFIX = "browsergym/"
_WEBENV_OPTIONS = (
    "reward",
    "step_timeout",
    "max_snapshot_chars",
    "screenshot",
    "max_actions",
    "settle_ms",
    "browsers",
    "viewport",
    "action_timeout_ms",
)


class UnsupportedBrowserGymTaskError(RllmError, ValueError):
    """A BrowserGym task family other than MiniWoB++."""


def miniwob_task(env_id: str) -> str:
    """The MiniWoB++ task name of a BrowserGym env id (`browsergym/miniwob.click-button` -> `click-button`)."""
    name = env_id[len(_PREFIX) :] if env_id.startswith(_PREFIX) else env_id
    family, dot, task = name.partition(".")
    if family != "miniwob" or not dot or not task:
        raise UnsupportedBrowserGymTaskError(
            f"BrowserGymEnv(env_id={env_id!r}): rllm plays BrowserGym's MiniWoB++ tasks only "
            "('browsergym/miniwob.<task>', the 130 of rllm.tasks.web.miniwob.task_names()); for other BrowserGym "
            "benchmarks use rllm.tasks.web.browsergym.BrowserGymEnv in BrowserGym's venv (make browsergym)"
        )
    return task


class BrowserGymEnv(BaseEnv):
    blocking = True

    def __init__(self, env_id: str = "browsergym/openended", task: dict | None = None, **env_kwargs: Any) -> None:
        self.env_id, self.task = env_id, dict(task or {})
        self.name = miniwob_task(env_id)
        env_kwargs.pop("headless", None)  # always headless here
        timeout_ms = env_kwargs.pop("timeout", None)
        self.seed = env_kwargs.pop("seed", self.task.get("seed"))
        if unknown := sorted(set(env_kwargs) - set(_WEBENV_OPTIONS)):
            raise TypeError(
                f"BrowserGymEnv got unknown argument(s) {unknown}: it takes headless, timeout (ms per "
                f"action), seed, and rllm's WebEnv options {list(_WEBENV_OPTIONS)}"
            )
        if timeout_ms is not None:
            env_kwargs.setdefault("action_timeout_ms", float(timeout_ms))
        self.options = env_kwargs
        self.timeout = None  # rLLM's attribute (seconds to wait for its worker process); WebEnv has step_timeout
        self.env: Any = None
        from rllm.tasks.web.miniwob import task_url

        task_url(self.name)  # an unknown task fails here, naming close ones

    def reset(self) -> tuple[dict, dict]:
        from rllm.tasks.web.env import WebEnv

        self.close()
        seed = self.seed if self.seed is not None else random.randrange(2**31)
        self.env = WebEnv({"task": self.name, "seed": int(seed)}, **self.options)
        return self.env.reset()

    def step(self, action: Any) -> tuple[dict, float, bool, dict]:
        if self.env is None:
            raise RuntimeError("BrowserGymEnv.step() before reset()")
        return self.env.step(action)

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()

    @staticmethod
    def from_dict(extra_info: dict) -> BrowserGymEnv:
        options = {key: extra_info[key] for key in ("seed", *_WEBENV_OPTIONS) if key in extra_info}
        return BrowserGymEnv(
            env_id=extra_info["env_id"],
            headless=extra_info.get("headless", True),
            timeout=extra_info.get("timeout", 5000),
            **options,
        )

    @staticmethod
    def is_multithread_safe() -> bool:
        return True  # each env has its own browser context on the process's shared browsers

"""`WebEnv`: a MiniWoB++ task in a real headless Chromium, driven by Playwright (rllm.tasks.web.browser).

A task row is `{"task": "click-button", "seed": 3}` (rllm.tasks.web makes them). Per episode:
- `reset()` opens a fresh browser context on the process's shared browsers, loads the task's page from the `miniwob`
  wheel (a `file://` URL: no server, no network), seeds the page's random generator with the row's seed
  (`Math.seedrandom`), lifts the page's own 10 s episode clock (the engine's step and episode timeouts bound the
  episode instead: a model on a CPU is slower than MiniWoB's clock) and starts the episode. The same task and seed
  give the same page, utterance and snapshot: seeded episodes reproduce exactly.
- The observation is a dict: `goal` (the task's utterance), `axtree` (the page as Playwright's accessibility
  snapshot: one line per element, its role, name, value and `[ref=eN]`), `url`, `last_action`, `last_action_error`,
  and with `screenshot=True` the page as a base64 PNG (`screenshot`). `observation_text(obs)` renders it for a
  prompt.
- `step(action)` parses the reply's calls (rllm.tasks.web.actions: `click(ref)`, `fill(ref, text)`,
  `select_option(ref, value)`, `press(ref, key)`, `scroll(dx, dy)`, `noop()`, ...) and does them in order (at most
  `max_actions`, stopping at the first error or when the task ends). An action that cannot be parsed or done is
  not an exception: the agent sees why in `last_action_error`, and `info["action_errors"]` counts them.
- Reward and done come from the page's own globals (`WOB_DONE_GLOBAL`, `WOB_RAW_REWARD_GLOBAL`): `reward="binary"`
  gives 1.0 when the raw reward is positive (BrowserGym's and rLLM's MiniWoB reward), `"raw"` the page's raw reward
  in [-1, 1] (partial credit some tasks give). Not done -> 0.
- Failures of ours are `InfraError` (the engine retries the episode and counts it): the browser crashed or was
  killed mid-episode, a step ran past `step_timeout` s (a hung page: its browser is restarted), the page did not
  load.
"""

from __future__ import annotations

import base64
from typing import Any

from rllm.envs.base import BaseEnv
from rllm.errors import InfraError
from rllm.tasks.web.actions import ActionError, describe_actions, parse_actions, perform
from rllm.tasks.web.browser import shared_pool
from rllm.tasks.web.miniwob import task_url

__all__ = ["WebEnv", "observation_text"]

_OPTIONS = (
    "reward",
    "step_timeout",
    "action_timeout_ms",
    "max_snapshot_chars",
    "screenshot",
    "max_actions",
    "settle_ms",
    "browsers",
    "viewport",
)
# The page's score board ("Last reward", "Time left") and its between-episodes cover are not part of the task:
# hidden, they leave the snapshot.
_HIDE_SCOREBOARD = "#reward-display, #sync-task-cover { display: none !important; }"
# Elements a user would see as clickable (a pointer cursor) but that have no ARIA role are inline text to the
# accessibility tree, so they get no ref (MiniWoB's links are <span class="alink">). They are given the role they look
# like, link if underlined else button, before each snapshot (the tasks never read roles). BrowserGym reaches them
# through its own element ids on every node instead.
_EXPOSE_CLICKABLES = """() => {
    const native = new Set(["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "OPTION", "LABEL", "BODY", "HTML"]);
    for (const el of document.body.querySelectorAll("*")) {
        if (el.hasAttribute("role") || native.has(el.tagName) || el.id === "sync-task-cover") continue;
        const style = getComputedStyle(el);
        if (style.cursor !== "pointer" || getComputedStyle(el.parentElement).cursor === "pointer") continue;
        el.setAttribute("role", style.textDecorationLine.includes("underline") ? "link" : "button");
    }
}"""
_START = """seed => {
    Math.seedrandom(seed);
    core.EPISODE_MAX_TIME = 2e9;  // ms: under setTimeout's 2**31 limit, past which it fires at once
    core.startEpisodeReal();
}"""
_STATE = "() => [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON, core.getUtterance()]"


class WebEnv(BaseEnv):
    blocking = True

    def __init__(
        self,
        task: dict | str,
        *,
        reward: str = "binary",
        step_timeout: float = 15.0,
        action_timeout_ms: float = 1000.0,
        max_snapshot_chars: int = 6000,
        screenshot: bool = False,
        max_actions: int = 5,
        settle_ms: float = 50.0,
        browsers: int = 1,
        viewport: tuple[int, int] | list[int] = (500, 400),
        pool: Any = None,
    ) -> None:
        task = {"task": task} if isinstance(task, str) else dict(task)
        if "task" not in task:
            raise ValueError(
                "WebEnv: the task row needs 'task' (a MiniWoB++ task name, e.g. 'click-button') and "
                "'seed' (rllm.tasks.web.make_web_tasks makes such rows)"
            )
        if reward not in ("binary", "raw"):
            raise ValueError(f"WebEnv(reward={reward!r}): use 'binary' (1 if the task's raw reward > 0) or 'raw'")
        if max_actions < 1 or step_timeout <= 0 or max_snapshot_chars < 200:
            raise ValueError("WebEnv: max_actions >= 1, step_timeout > 0 and max_snapshot_chars >= 200 are required")
        self.task, self.name, self.seed = task, str(task["task"]), int(task.get("seed", 0))
        self.url = task_url(self.name)  # an unknown task fails here, naming close ones
        self.reward_mode, self.step_timeout = reward, float(step_timeout)
        self.action_timeout_ms, self.max_snapshot_chars = float(action_timeout_ms), int(max_snapshot_chars)
        self.screenshot, self.max_actions, self.settle_ms = bool(screenshot), int(max_actions), float(settle_ms)
        self.browsers, self.viewport = int(browsers), (int(viewport[0]), int(viewport[1]))
        self.pool = pool
        self._slot: int | None = None
        self._context: Any = None
        self._page: Any = None
        self.action_errors = 0
        self.done = False

    @classmethod
    def from_dict(cls, task: dict) -> WebEnv:
        task = dict(task)
        options = {key: task.pop(key) for key in _OPTIONS if key in task}
        return cls(task, **options)

    # ---- the episode -----------------------------------------------------------------------------------------

    def reset(self) -> tuple[dict, dict]:
        self.close()
        self.pool = self.pool or shared_pool(browsers=self.browsers)
        self.action_errors, self.done = 0, False
        self._slot, self._context, self._page = self._call(self._open, "loading the page")
        observation = self._call(lambda: self._observe(None, None), "reading the page")
        observation.pop("_state")
        return observation, {"task": self.name, "seed": self.seed, "actions": describe_actions()}

    def step(self, action: Any) -> tuple[dict, float, bool, dict]:
        if self._page is None:
            raise RuntimeError("WebEnv.step() before reset(), or after close()")
        try:
            actions = parse_actions(action)
        except ActionError as e:
            actions, error = [], str(e)
        else:
            error = None
        if actions:
            error = self._call(lambda: self._act(actions[: self.max_actions]), "acting")
        self.action_errors += error is not None
        shown = "; ".join(str(a) for a in actions[: self.max_actions]) or None
        observation = self._call(lambda: self._observe(shown, error), "reading the page")
        done, raw, why = observation.pop("_state")
        self.done = bool(done)
        reward = (float(raw > 0) if self.reward_mode == "binary" else float(raw)) if done else 0.0
        info = {
            "task": self.name,
            "seed": self.seed,
            "raw_reward": float(raw) if done else None,
            "reward_reason": why,
            "action_errors": self.action_errors,
            "last_action_error": error,
        }
        return observation, reward, self.done, info

    def close(self) -> None:
        context, slot, self._context, self._page = self._context, self._slot, None, None
        if context is not None and self.pool is not None:
            try:
                self.pool.call(lambda: self.pool.release(slot, context), 20)
            except Exception:  # a dead browser: its context is gone with it
                pass

    # ---- in the browser's loop ----------------------------------------------------------------------------------

    def _call(self, fn: Any, doing: str) -> Any:
        from playwright.async_api import Error as PlaywrightError

        try:
            return self.pool.call(fn, self.step_timeout)
        except TimeoutError:
            self._restart_browser()
            raise InfraError(
                f"WebEnv({self.name}, seed {self.seed}): {doing} took over {self.step_timeout:g} s "
                "(a hung page); its browser was restarted"
            ) from None
        except PlaywrightError as e:
            self._context = self._page = None
            first = str(e).split("\n")[0]
            raise InfraError(f"WebEnv({self.name}, seed {self.seed}): the browser failed while {doing}: {first}") from e

    def _restart_browser(self) -> None:
        slot, self._context, self._page = self._slot, None, None
        if slot is not None:
            try:
                self.pool.call(lambda: self.pool.restart(slot), 20)
            except Exception:  # the driver kills it at exit if it will not close now
                pass

    async def _open(self) -> tuple[int, Any, Any]:
        slot, context = await self.pool.new_context(viewport={"width": self.viewport[0], "height": self.viewport[1]})
        try:
            page = await context.new_page()
            await page.goto(self.url, wait_until="load")
            await page.add_style_tag(content=_HIDE_SCOREBOARD)
            await page.evaluate(_START, self.seed)
            await page.wait_for_function("() => WOB_TASK_READY", timeout=self.step_timeout * 1000)
        except BaseException:
            await self.pool.release(slot, context)
            raise
        return slot, context, page

    async def _act(self, actions: list) -> str | None:
        for action in actions:
            try:
                await perform(self._page, action, self.action_timeout_ms)
            except ActionError as e:
                return str(e)
            if await self._page.evaluate("() => WOB_DONE_GLOBAL"):
                break
        return None

    async def _observe(self, last_action: str | None, error: str | None) -> dict:
        page = self._page
        if self.settle_ms and last_action is not None:
            await page.wait_for_timeout(self.settle_ms)  # let the page's handlers and animations run
        done, raw, why, goal = await page.evaluate(_STATE)
        await page.evaluate(_EXPOSE_CLICKABLES)
        tree = await page.locator("body").aria_snapshot(mode="ai", timeout=self.step_timeout * 1000)
        if len(tree) > self.max_snapshot_chars:
            tree = tree[: self.max_snapshot_chars] + f"\n[... snapshot cut: {len(tree)} characters in all]"
        observation = {
            "goal": goal,
            "axtree": tree,
            "url": page.url,
            "last_action": last_action,
            "last_action_error": error,
            "_state": (done, raw, why),
        }
        if self.screenshot:
            observation["screenshot"] = base64.b64encode(await page.screenshot(type="png")).decode()
        return observation


def observation_text(observation: dict) -> str:
    """An observation as prompt text: the goal, the last action's error if any, then the page."""
    parts = [f"Goal: {observation['goal']}"]
    if observation.get("last_action_error"):
        parts.append(f"Your last action failed: {observation['last_action_error']}")
    parts.append(f"Page (accessibility tree; act on elements by their ref):\n{observation['axtree']}")
    return "\n\n".join(parts)

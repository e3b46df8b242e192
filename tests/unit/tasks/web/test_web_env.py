"""WebEnv in a real headless Chromium: seeding, rewards, the agent's mistakes, screenshots, concurrent episodes on
shared browsers, and browsers that crash or hang (an InfraError, a restarted browser, the next episode fine)."""

from __future__ import annotations

import base64
import os
import signal
import threading
import time

import pytest

from rllm.errors import InfraError
from rllm.tasks.web.agent import WebAgent
from rllm.tasks.web.browser import BrowserPool, chromium_pids
from rllm.tasks.web.env import WebEnv

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def pool(chromium):
    browsers = BrowserPool(browsers=2)
    yield browsers
    browsers.close()


def play(pool, task: str, seed: int, **options) -> WebEnv:
    env = WebEnv({"task": task, "seed": seed}, pool=pool, **options)
    env.reset()
    return env


def ref_of(observation: dict, role: str, name: str | None = None) -> str:
    start = f'- {role} "{name}"' if name else f"- {role}"
    line = next(line for line in observation["axtree"].splitlines() if line.strip().startswith(start))
    return line.split("[ref=")[1].split("]")[0]


def click(observation: dict, role: str, name: str | None = None) -> str:
    ref = ref_of(observation, role, name)
    return f"click({ref!r})"


def test_the_same_seed_gives_the_same_page_and_another_seed_another(pool):
    pages = []
    for seed in (5, 5, 6):
        env = WebEnv({"task": "click-checkboxes", "seed": seed}, pool=pool)
        observation, info = env.reset()
        pages.append((observation["goal"], observation["axtree"]))
        env.close()
    assert pages[0] == pages[1] and pages[0] != pages[2]
    assert info == {"task": "click-checkboxes", "seed": 6, "actions": info["actions"]} and "fill(" in info["actions"]


def test_the_right_button_scores_1_and_a_wrong_one_0(pool):
    env = play(pool, "click-button", 3)
    observation, _ = env.reset()
    assert observation["goal"] == 'Click on the "no" button.'
    assert "Last reward" not in observation["axtree"]  # the score board is hidden
    observation, reward, done, info = env.step(f"```\n{click(observation, 'button', 'no')}\n```")
    assert (reward, done, info["raw_reward"], info["action_errors"]) == (1.0, True, 1.0, 0)
    observation, _ = env.reset()
    _, reward, done, info = env.step(click(observation, "button", "Okay"))
    assert (reward, done, info["raw_reward"]) == (0.0, True, -1.0)
    env.close()


def test_mistakes_are_shown_to_the_agent_and_counted_not_raised(pool):
    env = play(pool, "enter-text", 1)
    observation, _ = env.reset()
    submit = ref_of(observation, "button", "Submit")
    replies = ["I do not know.", "click('e999')", f"fill('{submit}', 'x')", "click('e1', 'e2')"]
    expected = ["no action found", "no element with ref 'e999'", "fill(", "at most 1"]
    for count, (reply, says) in enumerate(zip(replies, expected, strict=True), start=1):
        observation, reward, done, info = env.step(reply)
        assert says in observation["last_action_error"] and says in info["last_action_error"]
        assert (reward, done, info["action_errors"]) == (0.0, False, count)
    # a good action after them still works: fill then submit, as tool calls
    box = ref_of(observation, "textbox")
    name = observation["goal"].split('"')[1]
    calls = [{"name": "fill", "arguments": {"ref": box, "text": name}}, {"name": "click", "arguments": {"ref": submit}}]
    observation, reward, done, info = env.step({"tool_calls": calls, "content": "", "errors": []})
    assert (reward, done, observation["last_action_error"]) == (1.0, True, None)
    assert observation["last_action"] == f"fill('{box}', '{name}'); click('{submit}')"
    env.close()


def test_raw_reward_and_screenshots(pool):
    env = play(pool, "click-button", 3, reward="raw", screenshot=True, viewport=[320, 240])
    observation, _ = env.reset()
    png = base64.b64decode(observation["screenshot"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 320
    text, picture = WebAgent().format_observation(observation)  # the page's text, then the page as an image part
    assert observation["goal"] in text["text"] and picture["image_url"]["url"].endswith(observation["screenshot"])
    assert isinstance(WebAgent().format_observation({**observation, "screenshot": None}), str)
    _, reward, done, _ = env.step(click(observation, "button", "Okay"))
    assert (reward, done) == (-1.0, True)
    env.close()


def test_options_come_from_the_row_and_bad_ones_fail_clearly(pool):
    env = WebEnv.from_dict({"task": "click-test", "seed": 0, "reward": "raw", "max_actions": 2, "step_timeout": 7})
    assert (env.reward_mode, env.max_actions, env.step_timeout, env.seed) == ("raw", 2, 7.0, 0)
    with pytest.raises(ValueError, match="did you mean click-test"):
        WebEnv({"task": "click-tset"})
    with pytest.raises(ValueError, match="'binary'"):
        WebEnv({"task": "click-test"}, reward="dense")
    with pytest.raises(ValueError, match="needs 'task'"):
        WebEnv({"seed": 1})
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("noop()")


def test_concurrent_episodes_share_the_browsers(pool):
    rewards, errors = [], []

    def episode(seed: int) -> None:
        try:
            env = play(pool, "click-test", seed)
            observation, _ = env.reset()
            rewards.append(env.step(click(observation, "button"))[1])
            if seed == 0:
                assert pool.open_contexts() >= 1
            env.close()
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=episode, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and rewards == [1.0] * 4
    assert pool.live_browsers() == 2  # four episodes at once spread over both browsers
    assert pool.open_contexts() == 0


def test_a_killed_browser_fails_the_episode_as_infra_and_the_next_one_gets_a_new_browser(pool):
    env = play(pool, "click-test", 0)
    restarts = pool.restarts
    for pid in chromium_pids():
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    with pytest.raises(InfraError, match="browser failed"):
        env.step("click('e5')")
    env.close()
    fresh = play(pool, "click-test", 0)
    observation, _ = fresh.reset()
    assert fresh.step(click(observation, "button"))[1] == 1.0
    assert pool.restarts > restarts
    fresh.close()


def test_a_hung_page_times_out_as_infra_and_its_browser_is_replaced(pool):
    env = play(pool, "click-test", 0, step_timeout=3)
    page = env._page
    pool.call(lambda: page.evaluate("setTimeout(() => { while (true) {} }, 0)"), 5)
    started = time.monotonic()
    with pytest.raises(InfraError, match="hung page"):
        env.step("click('e5')")
    assert time.monotonic() - started < 10
    env.close()
    fresh = play(pool, "click-test", 1)
    observation, _ = fresh.reset()
    assert fresh.step(click(observation, "button"))[1] == 1.0
    fresh.close()


def test_a_partly_covered_element_is_clicked_where_it_shows(pool):
    env = play(pool, "click-test-2", 6)  # seed 6 places TWO over the centre of ONE
    observation, _ = env.reset()
    _, reward, done, info = env.step(click(observation, "button", "ONE"))
    assert (reward, done, info["action_errors"]) == (1.0, True, 0)
    env.close()

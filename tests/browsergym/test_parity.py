"""Reward parity between BrowserGym (the optional adapter, rllm.tasks.web.browsergym) and rllm's WebEnv on the same
MiniWoB++ task and seed: the same page (goal), the same reward for the right answer and for a wrong one.

Runs in BrowserGym's own venv (`make browsergym`; `.venv-browsergym/bin/python -m pytest tests/browsergym`): its
Playwright 1.44 cannot share a process with WebEnv's 1.65, so WebEnv plays in a subprocess of the main venv
($RLLM_MAIN_PYTHON, default .venv/bin/python) and answers in JSON. Skipped where BrowserGym is not installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("browsergym.miniwob", reason="BrowserGym is optional: `make browsergym` installs it")

from rllm.tasks.web.browsergym import BrowserGymEnv, miniwob_page_seed

REPO = Path(__file__).resolve().parents[2]
MAIN_PYTHON = os.environ.get("RLLM_MAIN_PYTHON", str(REPO / ".venv" / "bin" / "python"))
CASES = [(task, seed) for task in ("click-test-2", "click-button", "enter-text", "choose-list") for seed in (0, 1, 2)]

# WebEnv's side, in the main venv: per (task, page seed), the goal and the rewards of the right and a wrong answer.
OURS = r"""
import json, sys
from rllm.tasks.web import WebEnv
from rllm.tasks.web.oracle import elements, oracle_action
out = []
for task, seed in json.loads(sys.argv[1]):
    env = WebEnv({"task": task, "seed": seed})
    observation, _ = env.reset()
    goal, right, other = observation["goal"], oracle_action(task, observation), None
    reward_right = env.step(right)[1]
    observation, _ = env.reset()
    items = elements(observation["axtree"])
    if task == "choose-list":
        wanted = goal.split("Select ")[1].split(" from the list")[0]
        combo = next(e for e in items if e.role == "combobox").ref
        options = [l.split('"')[1] for l in observation["axtree"].splitlines() if "- option" in l]
        other = next(o for o in options if o != wanted)
        wrong = f"select_option({combo!r}, {other!r})\n" + right.splitlines()[-1]
    elif task == "enter-text":
        wrong = right.splitlines()[-1]  # submit the empty field
    elif task == "click-button":  # some pages have one button: the text field is the wrong target on every page
        wrong = "click(%r)" % next(e.ref for e in items if e.role == "textbox")
    else:
        target = right.split("'")[1]
        wrong = "click(%r)" % next(e.ref for e in items if e.role == "button" and e.ref != target)
    out.append({"goal": goal, "right": reward_right, "wrong": env.step(wrong)[1], "other_option": other})
    env.close()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ours() -> list[dict]:
    jobs = [(task, miniwob_page_seed(seed)) for task, seed in CASES]
    done = subprocess.run(
        [MAIN_PYTHON, "-c", OURS, json.dumps(jobs)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def bid(tree: str, role: str, name: str | None = None) -> str:
    pattern = rf"\[(\w+)\] {role} '{re.escape(name)}'" if name else rf"\[(\w+)\] {role}\b"
    return re.search(pattern, tree).group(1)


def answers(task: str, goal: str, tree: str, other_option: str | None) -> tuple[str, str]:
    """BrowserGym's side: the right action and a wrong one, on its bids (its tree lists no closed list's options:
    the wrong option is the one WebEnv chose)."""
    if task == "enter-text":
        submit = f"click('{bid(tree, 'button', 'Submit')}')"
        return f"fill('{bid(tree, 'textbox')}', '{goal.split(chr(34))[1]}')\n{submit}", submit
    if task == "choose-list":
        wanted = goal.split("Select ")[1].split(" from the list")[0]
        combo, submit = bid(tree, "combobox"), f"click('{bid(tree, 'button', 'Submit')}')"
        return (
            f"select_option('{combo}', '{wanted}')\n{submit}",
            f"select_option('{combo}', '{other_option}')\n{submit}",
        )
    if task == "click-button":
        return f"click('{bid(tree, 'button', goal.split(chr(34))[1])}')", f"click('{bid(tree, 'textbox')}')"
    name = goal.split("button ")[1].rstrip(".")
    others = [b for b, n in re.findall(r"\[(\w+)\] button '([^']*)'", tree) if n != name]
    return f"click('{bid(tree, 'button', name)}')", f"click('{others[0]}')"


@pytest.mark.parametrize("index", range(len(CASES)))
def test_same_page_and_same_rewards_as_webenv(ours, index):
    task, seed = CASES[index]
    rewards = {}
    for kind in ("right", "wrong"):
        env = BrowserGymEnv({"task": task, "seed": seed})
        observation, _ = env.reset()
        assert observation["goal"] == ours[index]["goal"], (task, seed)
        right, wrong = answers(task, observation["goal"], observation["axtree"], ours[index]["other_option"])
        rewards[kind] = env.step(right if kind == "right" else wrong)[1]
        env.close()
    assert rewards == {"right": ours[index]["right"], "wrong": ours[index]["wrong"]} == {"right": 1.0, "wrong": 0.0}

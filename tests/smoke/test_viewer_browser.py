"""`rllm view` in a real browser: Debian's headless Chromium, driven by Playwright, on a real training run (`rllm
train` for two GRPO steps of a two-turn workflow whose rewards vary, so advantages are not all zero; tiny
random-init model, real SmolLM2 tokenizer). Asserts what a user sees; screenshots go to $RLLM_TEST_ARTIFACTS
(default test-artifacts/) as test artifacts."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import urllib.request
from pathlib import Path

import pytest
import yaml

from rllm.runs import read_episode_records
from rllm.training.batch import build_rows
from rllm.viewer import start_server
from tests.conftest import run_rllm

ARTIFACTS = Path(os.environ.get("RLLM_TEST_ARTIFACTS", "test-artifacts")) / "viewer"
TRAIN = ["rollout.n=4", "rollout.max_tokens=6", "trainer.tasks_per_step=2", "data.train_size=6", "data.val_size=2",
         "optim.micro_batch_size=4", "trainer.total_steps=2"]  # fmt: skip
TWO_TURN_PARITY = """
from rllm import Step, Trajectory, Workflow


class TwoTurnParity(Workflow):
    \"\"\"Two turns; a reply of odd length earns 1, as a random model's are about half the time.\"\"\"

    async def run(self, task, uid):
        messages, steps = [{"role": "user", "content": task["question"]}], []
        for _ in range(2):
            output = await self.generate(messages)
            steps.append(Step(chat_completions=list(messages), model_output=output, reward=float(len(output.text) % 2)))
            messages = [*messages, {"role": "assistant", "content": output.text},
                        {"role": "user", "content": "Again, an odd length."}]
        self.commit(Trajectory(steps=steps))
"""


@pytest.fixture(scope="module")
def viewer(tmp_path_factory, tiny_model_dir, chromium):
    """One training run, a damaged copy of it (a corrupt line, a half-written last line), one server, one browser."""
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("runs")
    workflow = tmp_path_factory.mktemp("workflow") / "parity.py"
    workflow.write_text(TWO_TURN_PARITY)
    out = run_rllm("train", "configs/arithmetic_grpo.yaml", *TRAIN, f"model.name={tiny_model_dir}",
                   f"workflow={workflow}:TwoTurnParity", f"trainer.run_dir={root}", "trainer.name=lake",
                   "--no-progress")  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"rllm view {root / 'lake'}" in out.stderr and f"rllm view {root / 'lake'}" in out.stdout
    damaged = root / "lake-damaged"
    shutil.copytree(root / "lake", damaged, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    lines = (damaged / "episodes.jsonl").read_bytes().splitlines(keepends=True)
    (damaged / "episodes.jsonl").write_bytes(b"".join(lines[:3]) + b"{not json\n" + b"".join(lines[3:]) + lines[0][:50])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    server = start_server([root], cache_dir=tmp_path_factory.mktemp("index"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        try:
            yield server.url, root, browser
        finally:
            browser.close()
            server.shutdown()


def _open(browser, url):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    _ready(page)
    return page, errors


def _ready(page):
    page.wait_for_function("document.body.dataset.ready === location.hash", timeout=30_000)


def _total(page) -> int:
    return int(page.get_by_test_id("total").inner_text().split()[0])


def test_the_curve_links_to_the_episodes_of_its_step_and_filters_narrow_the_table(viewer):
    url, _, browser = viewer
    page, errors = _open(browser, url + "#/run/lake")
    reward = page.locator('[data-chart="reward"] circle[data-key="reward_mean"]')
    assert reward.count() == 2  # one point per training step
    assert page.locator('[data-chart="reward"] circle[data-key="val/reward_mean"]').count() == 2  # before, after
    assert _total(page) == 2 * 2 * 4 + 2 * 2  # training episodes + validation before and after
    page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)

    reward.nth(1).click()  # step 2's point: its episodes
    _ready(page)
    assert "split=train" in page.url and "step=2" in page.url and _total(page) == 8
    page.select_option('select[name="split"]', "val")
    _ready(page)
    assert _total(page) == 2  # validation after step 2
    task = page.locator("[data-testid=episodes] tr[data-line] td").nth(3).inner_text()
    page.select_option('select[name="split"]', "")
    _ready(page)
    page.fill('input[name="q"]', task)
    page.press('input[name="q"]', "Enter")
    _ready(page)
    narrowed = _total(page)
    assert 1 <= narrowed < 10 and "q=" in page.url
    rows = page.locator("[data-testid=episodes] tr[data-line]")
    assert rows.count() == narrowed and all(task in rows.nth(i).inner_text() for i in range(narrowed))
    page.screenshot(path=str(ARTIFACTS / "filtered.png"), full_page=True)

    shared = page.url  # a shared link reopens the same view in a fresh browser tab
    again, _ = _open(browser, shared)
    assert _total(again) == narrowed and again.input_value('input[name="q"]') == task
    assert not errors


def test_an_episode_shows_its_conversation_and_exactly_its_trained_tokens(viewer):
    url, root, browser = viewer
    records = read_episode_records(root / "lake", split="train")
    record = next(r for r in records if r["step"] == 2)
    line = 1 + next(
        i
        for i, raw in enumerate((root / "lake" / "episodes.jsonl").read_text().splitlines())
        if f'"id": "{record["episode"].id}"' in raw and raw.startswith('{"step": 2, "split": "train"')
    )
    rollout = yaml.safe_load((root / "lake" / "config.yaml").read_text())["rollout"]
    episode = record["episode"]
    pairs = [(episode, t) for t in episode.trajectories]
    rows, stats = build_rows(pairs, step_advantages=[[0.0] * len(t.steps) for t in episode.trajectories],
                             max_prompt_length=rollout["max_prompt_length"],
                             max_response_length=rollout["max_response_length"])  # fmt: skip
    page, errors = _open(browser, f"{url}#/run/lake/episode/{line}")
    conversation = page.get_by_test_id("conversation").inner_text()
    assert episode.task["question"] in conversation and "Again, an odd length." in conversation
    assert page.locator(".msg.assistant").count() == len(episode.trajectories[0].steps)
    page.screenshot(path=str(ARTIFACTS / "conversation.png"), full_page=True)

    page.click('[data-tab="tokens"]')
    _ready(page)
    assert "view=tokens" in page.url
    trained = int(page.get_by_test_id("trained-count").inner_text().split()[0])
    assert trained == sum(row.num_loss_tokens for row in rows) > 0
    assert page.locator(".overlay .tok.trn").count() == trained
    assert page.get_by_test_id("row-split").count() == stats["rows_split"]
    assert page.get_by_test_id("advantages").inner_text() == "advantages as recorded by the trainer"
    token = page.locator(".overlay .tok.trn").first
    token.hover()
    tip = page.locator("#tip").inner_text()
    assert "trained (loss mask 1)" in tip and "sampler log-prob" in tip and "advantage" in tip
    assert re.search(r"weight version \d", tip)
    page.screenshot(path=str(ARTIFACTS / "overlay.png"), full_page=True)
    assert not errors


def test_advantages_of_a_run_written_before_they_were_recorded_are_recomputed_exactly(viewer):
    url, root, _ = viewer
    old = root / "lake-old"
    shutil.copytree(root / "lake", old, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    records = [json.loads(line) for line in (old / "episodes.jsonl").read_text().splitlines()]
    (old / "episodes.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "trained"}) + "\n"
                                                for r in records))  # fmt: skip
    advantages = set()
    for line, record in enumerate(records, start=1):
        if record["split"] != "train":
            continue
        recorded = _get(f"{url}api/run/lake/episode/{line}")["trajectories"][0]["overlay"]
        recomputed = _get(f"{url}api/run/lake-old/episode/{line}")["trajectories"][0]["overlay"]
        assert (recorded["advantages"], recomputed["advantages"]) == ("recorded", "recomputed")
        assert [r["advantage"] for r in recomputed["rows"]] == [r["advantage"] for r in recorded["rows"]]
        advantages.update(a for r in recorded["rows"] for a in r["advantage"] if a is not None)
    assert len(advantages) > 1  # rewards varied: the comparison is not of zeros


def _get(url):
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def test_compare_shows_one_task_at_two_checkpoints(viewer):
    url, root, browser = viewer
    records = read_episode_records(root / "lake", split="val")
    task = records[0]["episode"].task_id
    page, errors = _open(browser, f"{url}#/compare?a=lake&b=lake&split=val&sa=0&sb=2&task={task}")
    summaries = page.get_by_test_id("compare-summary")
    assert summaries.count() == 2
    assert "step 0: 1 episodes" in summaries.nth(0).inner_text()
    assert "step 2: 1 episodes" in summaries.nth(1).inner_text()
    assert page.get_by_test_id("conversation").count() == 2
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)
    assert not errors


def test_a_corrupt_line_is_marked_and_the_rest_shown(viewer):
    url, _, browser = viewer
    page, errors = _open(browser, url + "#/run/lake-damaged")
    assert _total(page) == 21  # 20 episodes and the corrupt line; the half-written last line waits
    corrupt = page.locator("tr.corrupt")
    assert corrupt.count() == 1 and "line 4: not an episode record" in corrupt.inner_text()
    assert page.get_by_text("last line being written").count() == 1
    page.goto(url + "#/run/nope")
    _ready(page)
    assert "no run 'nope'" in page.locator("main").inner_text()
    assert not errors


def test_images_in_a_conversation_show_as_thumbnails_that_open_the_full_image(tmp_path, viewer):
    """Its own small eval run (an env that shows pictures), no training: the page shows each image, never its JSON."""
    from tests.unit.test_images import picture_run

    _, _, browser = viewer
    # The module's browser runs Playwright's event loop in this thread: the engine's own loop runs in another.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        run = pool.submit(picture_run, tmp_path).result()
    server = start_server([run], cache_dir=tmp_path / "index")
    try:
        page, errors = _open(browser, f"{server.url}#/run/pics/episode/1")
        thumbs = page.locator(".msg img.thumb")
        assert thumbs.count() == 3  # the first screen, the second (in the next prompt), the last observation
        page.wait_for_function("[...document.querySelectorAll('img.thumb')].every((i) => i.complete)")
        for i in range(3):
            thumb = thumbs.nth(i)
            assert thumb.evaluate("(img) => img.naturalWidth") == 5  # the picture itself, loaded
            assert thumb.evaluate("(img) => img.closest('a').href") == thumb.evaluate("(img) => img.src")
            assert "/api/run/pics/images/" in thumb.evaluate("(img) => img.src")
        conversation = page.get_by_test_id("conversation").inner_text()
        assert "image_url" not in conversation and "rllm-image" not in conversation
        page.screenshot(path=str(ARTIFACTS / "images.png"), full_page=True)
        page.close()
        assert not errors
    finally:
        server.shutdown()

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
from tests.support.cli import run_rllm

ARTIFACTS = Path(os.environ.get("RLLM_TEST_ARTIFACTS", "test-artifacts")) / "viewer"
TRAIN = [
    "rollout.n=4",
    "rollout.max_tokens=6",
    "trainer.tasks_per_step=2",
    "data.train_size=6",
    "data.val_size=2",
    "optim.micro_batch_size=4",
    "trainer.total_steps=2",
]
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
    out = run_rllm(
        "train",
        "configs/arithmetic_grpo.yaml",
        *TRAIN,
        f"model.name={tiny_model_dir}",
        f"workflow={workflow}:TwoTurnParity",
        f"trainer.run_dir={root}",
        "trainer.name=lake",
        "--no-progress",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"rllm view {root / 'lake'}" in out.stderr and f"rllm view {root / 'lake'}" in out.stdout
    _uniform_group_copy(root)
    _sft_dpo_and_eval_runs(root, tiny_model_dir)
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


def _uniform_group_copy(root):
    """lake-uniform: the run with one group of its last step made uniform (every sample the same reward), as GRPO
    records such a group: advantage 0 on every step, trained with no gradient."""
    copy = root / "lake-uniform"
    shutil.copytree(root / "lake", copy, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    records = [json.loads(line) for line in (copy / "episodes.jsonl").read_text().splitlines()]
    last = max(r["step"] for r in records if r["split"] == "train")
    task = next(r["episode"]["id"].rsplit(":", 1)[0] for r in records if r["split"] == "train" and r["step"] == last)
    for record in records:
        if record["split"] == "train" and record["step"] == last and record["episode"]["id"].startswith(task + ":"):
            for trajectory, trained in zip(record["episode"]["trajectories"], record["trained"], strict=True):
                trajectory["reward"] = 1.0
                for step, entry in zip(trajectory["steps"], trained, strict=True):
                    step["reward"], entry["advantage"] = 0.5, 0.0
    (copy / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


HOSTILE = '<img src=x onerror="document.body.dataset.pwned=1"><script>document.body.dataset.pwned=1</script>'
AXTREE = f'- textbox "Name" [ref=e31]\n- button "Submit" [ref=e32]\n- text "{HOSTILE}"'
TOOL_RESULT = {"role": "tool", "name": "bash", "content": "README.md\nparser_of_tabs.py", "tool_call_id": "c1"}
NO_TOOL = {"role": "user", "content": "No tool call found in your reply. Call one of the tools."}
# the metrics keys `rllm sft` and `rllm dpo` log per step (rllm.training.sft, losses.dpo_loss)
SFT_METRICS = {"loss": 2.5, "entropy": 3.0, "grad_norm": 1.0, "lr": 1e-4, "examples": 4}
DPO_REWARDS = {"rewards/chosen": 0.1, "rewards/rejected": -0.1, "rewards/margins": 0.2, "rewards/accuracies": 0.6}
DPO_METRICS = {"loss": 0.69, **DPO_REWARDS, "logps/chosen": -9.0, "logps/rejected": -9.5, "grad_norm": 1.0}
VALIDATION = {"val/success_rate": 0.0, "val/reward_mean": 0.0, "val/response_length_mean": 6.0, "val/token_mismatch": 0}


def _sft_dpo_and_eval_runs(root, model):
    """Runs as `rllm sft`, `rllm dpo` and `rllm eval` write them (manifest kind, config, their metrics keys,
    summary.json), without the minutes of training: tune (SFT), prefer (DPO) and quiz (eval: two of lake's
    validation episodes, one under another id, one whose id is lake's but whose question is not, a web episode
    and a SWE episode with their structured observations)."""
    from rllm.runs import RunLog, write_json
    from rllm.types import Episode

    config = f"model:\n  name: {model}\ndata:\n  task: arithmetic\nalgorithm:\n  advantage: reinforce\n"
    for name, kind, metrics in (("tune", "sft", SFT_METRICS), ("prefer", "dpo", DPO_METRICS)):
        run = root / name
        run.mkdir()
        write_json(run / "manifest.json", {"kind": kind, "model": str(model)})
        (run / "config.yaml").write_text(config)
        log = RunLog(run)
        log.log(0, VALIDATION)
        for step in (1, 2, 3):
            log.log(step, {key: value - step / 10 for key, value in metrics.items()})
        log.log(3, {**VALIDATION, "val/success_rate": 0.5})
        write_json(run / "result.json", {"steps": 3})

    same, other = (r["episode"] for r in read_episode_records(root / "lake", split="val")[:2])
    renamed = same.model_copy(update={"id": "arith-9-5:0", "task": {**same.task, "id": "arith-9-5"}})
    changed = Episode.model_validate_json(other.model_dump_json().replace(other.task["question"], "What is 7 * 9?"))
    run = root / "quiz"
    run.mkdir()
    write_json(run / "manifest.json", {"kind": "eval", "model": str(model)})
    (run / "config.yaml").write_text(config)
    RunLog(run).log_episodes(0, [renamed, changed, _web_episode(), _swe_episode()], "eval")
    write_json(run / "summary.json", {"success_rate": 0.25, "reward_mean": 0.25, "episodes": 4})


def _web_episode():
    """Two steps of the web env: its observations are dicts (goal, accessibility tree, url, last action), which
    WebAgent writes into the next prompt as text."""
    from rllm.tasks.web.env import observation_text
    from rllm.types import Episode, ModelOutput, Step, Trajectory

    start = {"goal": "Submit the form", "axtree": '- button "Begin" [ref=e1]', "url": "http://localhost/form"}
    first = {**start, "axtree": AXTREE, "last_action": "click('e1')"}
    last = {**start, "axtree": "\n".join(f'- text "row {i}"' for i in range(40)), "last_action": "click('e32')"}
    prompt = [{"role": "system", "content": "You browse."}, {"role": "user", "content": observation_text(start)}]
    again = [
        *prompt,
        {"role": "assistant", "content": "click('e1')"},
        {"role": "user", "content": observation_text(first)},
    ]
    steps = [
        Step(chat_completions=prompt, model_output=ModelOutput(text="click('e1')"), observation=first),
        Step(chat_completions=again, model_output=ModelOutput(text="click('e32')"), observation=last, done=True),
    ]
    return Episode(id="web-1:0", task={"goal": "Submit the form"}, trajectories=[Trajectory(steps=steps)])


def _swe_episode():
    """Two steps of the SWE env: its observations are chat lists (tool results, a nudge), appended to the prompt."""
    from rllm.types import Episode, ModelOutput, Step, Trajectory

    prompt = [{"role": "user", "content": "Fix: the parser drops tabs."}]
    again = [*prompt, {"role": "assistant", "content": "ls"}, TOOL_RESULT]
    steps = [
        Step(chat_completions=prompt, model_output=ModelOutput(text="ls"), observation=[TOOL_RESULT]),
        Step(chat_completions=again, model_output=ModelOutput(text="Fixed."), observation=[NO_TOOL]),
    ]
    return Episode(id="swe-1:0", task={"problem": "the parser drops tabs"}, trajectories=[Trajectory(steps=steps)])


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


def _line(run, keep) -> int:
    """The line number in `run`'s episodes.jsonl of the first record `keep(record)` accepts."""
    lines = (run / "episodes.jsonl").read_text().splitlines()
    return 1 + next(i for i, raw in enumerate(lines) if keep(json.loads(raw)))


def _lines(run, keep) -> set[int]:
    """The line numbers in `run`'s episodes.jsonl of every record `keep(record)` accepts."""
    lines = (run / "episodes.jsonl").read_text().splitlines()
    return {1 + i for i, raw in enumerate(lines) if keep(json.loads(raw))}


def test_the_curve_links_to_the_episodes_of_its_step_and_filters_narrow_the_table(viewer):
    url, root, browser = viewer
    page, errors = _open(browser, url + "#/run/lake")
    head = page.locator("h1 + .muted").inner_text()
    assert head.startswith("RL · ") and "estimator grpo" in head
    assert re.fullmatch(r"success rate \S+ \(validation, step 2\)", page.get_by_test_id("run-success").inner_text())
    reward = page.locator('[data-chart="reward"] circle[data-key="reward_mean"]')
    assert reward.count() == 2  # one point per training step
    assert page.locator('[data-chart="reward"] circle[data-key="val/reward_mean"]').count() == 2  # before, after
    assert _total(page) == 2 * 2 * 4 + 2 * 2  # training episodes + validation before and after
    page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)
    # the health panel: a random model's replies all run to max_tokens, so step 2 raises `truncation` (rllm.health),
    # marked on every curve, with links to the step's episodes and to five episodes that show it
    alarms = page.locator("[data-testid=health] li[data-alarm]")
    assert alarms.count() == 1 and alarms.first.get_attribute("data-alarm") == "truncation"
    assert alarms.first.inner_text().startswith("truncation at step 2: 100% of the episodes were cut by a length limit")
    assert page.locator('[data-chart="reward"] line[data-alarm="truncation"]').count() == 1
    shown = alarms.first.locator("a[data-line]")
    assert shown.count() == 5
    lines = {int(shown.nth(i).get_attribute("data-line")) for i in range(5)}
    step_2 = _lines(root / "lake", lambda r: r["split"] == "train" and r["step"] == 2)
    assert len(lines) == 5 and lines <= step_2

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
    rows, stats = build_rows(
        pairs,
        step_advantages=[[0.0] * len(t.steps) for t in episode.trajectories],
        max_prompt_length=rollout["max_prompt_length"],
        max_response_length=rollout["max_response_length"],
    )
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


def test_the_run_list_shows_kinds_and_success_rates_and_sft_and_dpo_runs_their_losses(viewer):
    url, _, browser = viewer
    page, errors = _open(browser, url)

    def cells(run):
        return [page.locator(f'tr[data-run="{run}"] [data-testid={c}]').inner_text() for c in ("kind", "estimator")]

    def success(run):
        return page.locator(f'tr[data-run="{run}"] [data-testid=success]').inner_text()

    assert cells("lake") == ["RL", "grpo"] and success("lake").endswith(" (validation, step 2)")
    assert cells("tune") == ["SFT", "—"] and success("tune") == "0.500 (validation, step 3)"
    assert cells("prefer") == ["DPO", "—"]
    assert cells("quiz") == ["eval", "—"] and success("quiz") == "0.250 (eval)"
    page.screenshot(path=str(ARTIFACTS / "runs.png"), full_page=True)

    validation = ["validation success rate", "validation reward"]
    sft_charts = ["loss", *validation, "grad norm", "entropy"]
    dpo_charts = ["loss", "preference accuracy", "implicit rewards", *validation, "grad norm"]
    for run, kind, charts in (("tune", "SFT", sft_charts), ("prefer", "DPO", dpo_charts)):
        page.goto(f"{url}#/run/{run}")
        _ready(page)
        assert page.locator("[data-chart] h3").all_inner_texts() == charts  # no reward, KL or mismatch curves
        assert page.locator('[data-chart="loss"] circle').count() == 3
        head = page.get_by_test_id("run-head").inner_text()
        assert head.startswith(kind + " · ") and "reinforce" not in head and "estimator" not in head
        assert page.get_by_test_id("run-success").inner_text() == "success rate 0.500 (validation, step 3)"
    page.screenshot(path=str(ARTIFACTS / "dpo.png"), full_page=True)
    page.goto(f"{url}#/run/quiz")
    _ready(page)
    assert page.get_by_test_id("run-success").inner_text().startswith("success rate 0.250 (eval) · mean reward")
    assert not errors


def test_structured_observations_show_as_what_they_are_once_and_untrained_tokens_say_so(viewer):
    url, root, browser = viewer
    page, errors = _open(browser, f"{url}#/run/quiz/episode/3")  # the web episode
    text = page.get_by_test_id("conversation").inner_text()
    assert "{'goal'" not in text and "'axtree'" not in text and '{"goal"' not in text
    assert text.count('button "Submit" [ref=e32]') == 1  # in the prompt the model read; the env's dict folded away
    raw = page.get_by_test_id("raw-observation")
    assert raw.count() == 1 and raw.get_attribute("open") is None
    last = page.get_by_test_id("observation")  # the last step's: no prompt after it shows it
    assert "goal: Submit the form" in last.inner_text() and "url: http://localhost/form" in last.inner_text()
    tree = last.locator('details[data-field="axtree"]')
    assert tree.inner_text().startswith("axtree (40 lines") and "row 39" not in last.inner_text()
    tree.locator("summary").click()
    assert "row 39" in last.inner_text()
    assert HOSTILE in text and page.locator("#app img").count() == 0  # shown as text, never run
    assert page.evaluate("document.body.dataset.pwned") is None
    page.screenshot(path=str(ARTIFACTS / "web-observation.png"), full_page=True)

    page.goto(f"{url}#/run/quiz/episode/4")  # the SWE episode: chat-list observations
    _ready(page)
    text = page.get_by_test_id("conversation").inner_text()
    assert "{'role'" not in text and text.count("parser_of_tabs.py") == 1
    nudge = page.get_by_test_id("observation").locator(".msg.user")
    assert nudge.count() == 1 and "No tool call found" in nudge.inner_text() and "OBSERVATION" in nudge.inner_text()

    for run, line, says in (("quiz", 1, "not trained: an eval episode"), ("lake", 1, "not trained: a validation")):
        page.goto(f"{url}#/run/{run}/episode/{line}?view=tokens")
        _ready(page)
        assert page.get_by_test_id("not-trained").inner_text().startswith(says)
        assert page.get_by_test_id("trained-count").inner_text().startswith("0 trained tokens")
        assert page.locator(".overlay .tok.trn, .overlay .tok.zero").count() == 0
        assert page.locator(".overlay .tok.smp").count() > 0
        assert "trained (advantage" not in page.get_by_test_id("legend").inner_text()
    page.screenshot(path=str(ARTIFACTS / "eval-tokens.png"), full_page=True)

    uniform = root / "lake-uniform"
    line = _line(uniform, lambda r: r["split"] == "train" and r["trained"][0][0]["advantage"] == 0)
    record = json.loads((uniform / "episodes.jsonl").read_text().splitlines()[line - 1])
    sampled = sum(len(s["model_output"]["completion_ids"]) for s in record["episode"]["trajectories"][0]["steps"])
    page.goto(f"{url}#/run/lake-uniform/episode/{line}?view=tokens")
    _ready(page)
    assert page.locator(".overlay .tok.zero").count() == sampled > 0 and page.locator(".overlay .tok.trn").count() == 0
    assert page.get_by_test_id("trained-count").inner_text() == (
        f"{sampled} trained tokens, {sampled} of them with advantage 0 (no gradient)"
    )
    assert "advantage 0: no gradient" in page.get_by_test_id("legend").inner_text()
    page.locator(".overlay .tok.zero").first.hover()
    assert "advantage 0: no gradient" in page.locator("#tip").inner_text()
    page.screenshot(path=str(ARTIFACTS / "zero-advantage.png"), full_page=True)
    assert not errors


def test_advantages_of_a_run_written_before_they_were_recorded_are_recomputed_exactly(viewer):
    url, root, _ = viewer
    old = root / "lake-old"
    shutil.copytree(root / "lake", old, ignore=shutil.ignore_patterns("checkpoints", "tensorboard"))
    records = [json.loads(line) for line in (old / "episodes.jsonl").read_text().splitlines()]
    (old / "episodes.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "trained"}) + "\n" for r in records)
    )
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

    # from an episode of training step 1: both sides open a step where its task appears (not the last step)
    page.goto(f"{url}#/run/lake/episode/{_line(root / 'lake', lambda r: r['split'] == 'train')}")
    _ready(page)
    page.get_by_text("compare this task across checkpoints or runs").click()
    _ready(page)
    assert all("step 1: 4 episodes of this task" in summaries.nth(i).inner_text() for i in (0, 1))

    # across runs, by the question, not the id: quiz asks lake's first question under another id, and under lake's
    # second id another question
    page.goto(f"{url}#/compare?a=lake&b=quiz&task={task}")
    _ready(page)
    assert "quiz · eval step 0: 1 episodes of this task" in summaries.nth(1).inner_text()
    assert "task id here: arith-9-5" in summaries.nth(1).inner_text()
    question = records[0]["episode"].task["question"]
    assert all(question in page.get_by_test_id("conversation").nth(i).inner_text() for i in (0, 1))
    page.goto(f"{url}#/compare?a=lake&b=quiz&task={records[1]['episode'].task_id}")
    _ready(page)
    assert summaries.nth(1).inner_text().startswith("quiz: no episode of this task")
    assert "7 * 9" not in page.locator("main").inner_text()
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
    from tests.support.envs import picture_run

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
